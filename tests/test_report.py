"""The report's words: it leads with the answer and its checks, the method sits in an
appendix, each caption appears once, figure titles say what they show, and the
provenance reads as a table of values.

The report is the demo's, run end to end on the tests' fake one-core provider (the
plumbing only: a quick plan, a CPU-time share, paired full-scale runs, a what-if).
"""

from __future__ import annotations

import contextlib
import dataclasses
import io
import json
import re
from pathlib import Path

import pytest

import shrink.pipeline
import shrink.providers
from shrink import demo
from shrink.loadcurve import LoadCurve
from shrink.prediction import Prediction
from shrink.report.build import write_report
from tests.helpers.fake_provider import FakeProvider

pytestmark = pytest.mark.compute

# What a person reads before the appendix: the answer, the checks, the figures.
MAIN_WORDS = 800


@pytest.fixture(scope="module")
def demo_out(tmp_path_factory: pytest.TempPathFactory) -> Path:
    mp = pytest.MonkeyPatch()
    mp.setattr(shrink.providers, "make_provider", lambda *a, **k: FakeProvider())
    mp.setattr(shrink.pipeline, "make_provider", lambda *a, **k: FakeProvider())
    mp.setattr(demo, "_check_quiet", lambda console: {"busy": {}, "steal": {}})
    out = tmp_path_factory.mktemp("demo")
    cfg = {"workload": "tcp", "rate": 2000.0, "duration": 20, "alpha": 0.25, "thresholds": None}
    printed = io.StringIO()
    try:
        with contextlib.redirect_stderr(printed):
            demo.run_demo(out, quick=True, config=cfg)
    finally:
        mp.undo()
    (out / "console.txt").write_text(printed.getvalue())
    return out


def _sections(md: str) -> list[str]:
    return re.findall(r"^## (.+)$", md, flags=re.M)


def test_the_report_leads_with_the_answer_and_its_checks(demo_out: Path):
    from shrink.report.build import APPENDIX

    md = (demo_out / "report.md").read_text()
    heads = _sections(md)
    assert heads[:2] == ["Answer", "Checks"], heads
    assert heads.index(APPENDIX) > heads.index("Latency against load")
    main, appendix = md.split(f"## {APPENDIX}")
    # The answer: the mapping, its MATs with intervals, the validation's errors.
    assert "Deploy **1-replica**" in main and "95% interval" in main
    assert "Checked against a full-scale run: the predicted MATs were off by mean" in main
    # The checks a reader needs first: the generator, the host's drift, the share's speed.
    checks = main.split("## Checks")[1].split("\n## ")[0]
    for row in (
        "| Load generator kept to its schedule",
        "| Host's drift over the validation's runs",
        "| Host between the share's runs and the validation's own levels",
        "| Share's speed",
    ):
        assert row in checks, checks
    # The demo's share is taken at its nominal fraction: the row says so, and how the
    # model error's content term corrects it (a static page: no dynamic work, x1.00).
    speed_row = next(line for line in checks.splitlines() if line.startswith("| Share's speed"))
    assert "**assumed**" in speed_row and "nothing ran on the full target" in speed_row
    assert "nothing corrects them here: the simulated share" in speed_row, speed_row
    # The method's prose and the levels measured are in the appendix, not before it.
    for prose in ("Levels measured on the share", "Method and assumptions", "Provenance"):
        assert prose not in main and prose in appendix
    assert "Wasserstein" not in main and "Wasserstein" in appendix
    assert len(main.split()) < MAIN_WORDS, len(main.split())


def test_every_caption_appears_once(demo_out: Path):
    md = (demo_out / "report.md").read_text()
    captions = re.findall(r"^\*(.+)\*$", md, flags=re.M)
    assert len(captions) == 3  # latency, CDFs, what-if
    for caption in captions:
        assert md.count(caption) == 1, caption
    html = (demo_out / "report.html").read_text()
    for caption in captions:
        assert html.count(caption.split(":")[0]) == 1, caption


def test_the_cdf_title_names_the_level_it_shows(demo_out: Path, monkeypatch, tmp_path):
    """With levels at 10% and 90% utilization the one nearest 80% is at 90%: the title
    says 90%, not "nearest 80%"."""
    import shrink.report.sections.curves as curves

    titles = []
    real = curves.cdf_figure

    def spy(path, entries, *, title):
        titles.append(title)
        return real(path, entries, title=title)

    monkeypatch.setattr(curves, "cdf_figure", spy)
    measured = LoadCurve.read_json(demo_out / "measured-curve.json")
    shown = [lv for lv in measured.levels if lv.utilization is not None]
    shown = [min(shown, key=lambda lv: lv.utilization), max(shown, key=lambda lv: lv.utilization)]
    top = round(100 * shown[1].utilization)
    assert abs(top - 80) < abs(round(100 * shown[0].utilization) - 80)
    curve = dataclasses.replace(measured, levels=shown)
    pred = Prediction.from_dict(json.loads((demo_out / "prediction.json").read_text()))
    md = write_report(tmp_path, pred, measured=curve)["md"].read_text()
    assert len(titles) == 1 and f"at {top}% utilization (level " in titles[0], titles
    assert "nearest 80%" not in titles[0]
    assert f"at {top}% utilization (level " in md


def test_the_provenance_is_a_table_of_readable_values(demo_out: Path):
    from shrink.report.sections.assumptions import provenance_rows

    md = (demo_out / "report.md").read_text()
    prov = md.split("## Provenance")[1]
    assert "{" not in prov and "`{}`" not in md, prov
    assert "| share | CPU-time share: CPUs 1, fraction 0.25, quota 4000 us every 16000 us" in prov
    rows = provenance_rows(
        {"target": "{}", "share": "", "seed": 1, "server_cpus": [0, 1, 2, 3], "x": None}
    )
    assert rows == [["seed", "1"], ["server cpus", "0-3"]]
    versions = provenance_rows({"target": json.dumps({"lighttpd": "1.4.69", "php": "8.2"})})
    assert versions == [["target", "lighttpd 1.4.69, php 8.2"]]


def test_the_demo_prints_its_sections_in_order(demo_out: Path):
    printed = (demo_out / "console.txt").read_text()
    numbers = [int(n) for n in re.findall(r"─ (\d)\. ", printed)]
    assert numbers == [1, 2, 3, 4], printed


def test_the_share_speed_row_says_how_the_content_term_corrects_a_nominal_share():
    from shrink.report.sections.self_checks import _speed_items
    from shrink.share import Share

    share = Share("cpu_time", (1,), 0.25)
    merr = {
        "correction": 1.6,
        "provenance": {"slope": 0.34, "dynamic_share": 0.9, "runs": 40, "machine": "a VM"},
    }
    [[name, text]] = _speed_items(share, merr)
    assert name == "Share's speed" and "**assumed**" in text
    assert (
        "corrects them by x1.60 (its dynamic pages took 90% of its light-load work; "
        "slope 0.34, fitted on 40 runs, a VM)" in text
    )
    # No slope fitted (an older model error): it says so rather than claim a correction.
    [[_, bare]] = _speed_items(share, {"correction": 1.0, "provenance": {}})
    assert bare.endswith("no fitted term corrects them")


def test_a_level_is_written_alike_everywhere_and_the_caption_says_80_once(demo_out: Path, tmp_path):
    """The levels table wrote 35.64, the CDF caption 35.6, the offered-load check
    3.99311 (the same level rounded three ways); and the caption read "nearest 80%
    utilization of the server at 80% utilization"."""
    from shrink.report.sections.self_checks import _linear_verdict

    measured = LoadCurve.read_json(demo_out / "measured-curve.json")
    odd = [dataclasses.replace(lv, level=lv.level + 0.035905) for lv in measured.levels]
    curve = dataclasses.replace(measured, levels=odd)
    pred = Prediction.from_dict(json.loads((demo_out / "prediction.json").read_text()))
    md = write_report(tmp_path, pred, measured=curve)["md"].read_text()
    caption = next(c for c in re.findall(r"^\*(.+)\*$", md, flags=re.M) if "CDF" in c or
                   "distribution" in c)  # fmt: skip
    shown = re.search(r"\(level ([0-9.]+)\)", caption)
    assert shown is not None, caption
    assert f"| {shown.group(1)} |" in md, (shown.group(1), md)  # the table's text of it
    assert "of the server at" not in caption, caption
    verdict = _linear_verdict({"offered_linear": False, "offered_worst_level": 3.99311})
    assert "furthest at level 3.993;" in verdict, verdict


def test_validate_prints_a_bounded_error_as_the_report_writes_it():
    """Against a measured MAT that is only a lower bound (>= 2,652) the report said the
    error was 'at most +364.1%' and ``shrink validate`` printed 'error +364.1%'."""
    from shrink.cli.validate_cmd import validation_lines

    m = {"predicted": 12309.1, "predicted_status": "ok", "measured": 2652.3,
         "measured_status": "not_reached", "error": 12309.1 / 2652.3 - 1}  # fmt: skip
    (line,) = validation_lines({"mats": {"mean": m}}, {"mean": True})
    assert "measured >= 2,652 req/s, error at most +364.1%" in line, line
    ok = {**m, "measured": 11000.0, "measured_status": "ok", "error": 12309.1 / 11000 - 1}
    (line,) = validation_lines({"mats": {"mean": ok}}, {"mean": False})
    assert line.endswith("error +11.9%"), line


def test_the_appendix_gives_the_share_mat_that_shrink_mat_reads(demo_out: Path):
    """The share's own MAT was in prediction.json only: the report gave no number a
    user could check with `shrink mat measured-curve.json`. The appendix now gives it
    beside the levels, at the threshold it was read at (slow motion on a CPU-time
    share), with the command; running that command prints the same MAT."""
    from typer.testing import CliRunner

    from shrink.cli import app

    md = (demo_out / "report.md").read_text()
    line = next(ln for ln in md.splitlines() if ln.startswith("The share's own MAT"))
    cmds = re.findall(r"`shrink (mat [^`]+)`", line)
    assert len(cmds) == 2, line
    pred = json.loads((demo_out / "prediction.json").read_text())
    for cmd, stat in zip(cmds, ("mean", "p999"), strict=True):
        args = cmd.replace("measured-curve.json", str(demo_out / "measured-curve.json"))
        r = CliRunner().invoke(app, [*args.split(), "--json"])
        assert r.exit_code in (0, 99), r.output
        read = json.loads(r.stdout)
        assert read["mat"] == pytest.approx(pred["measured_mats"][stat]["mat"])
        assert f"{read['mat']:,.0f}" in line, (line, read["mat"])


@pytest.mark.compute
def test_the_share_mat_command_gives_the_threshold_the_mat_was_read_at():
    """On a CPU-time share the MAT is read at the threshold over the share's scale (0.5 s
    over 0.3): the command beside it said '--threshold 1.66667s', another threshold, so
    `shrink mat` read the curve somewhere else than the number it stood beside."""
    from types import SimpleNamespace

    from shrink.checks import parse_threshold
    from shrink.report.sections.self_checks import share_mats_text

    for thr in (0.5 / 0.3, 0.1 / 3, 0.0029, 2.0):
        sp = SimpleNamespace(threshold=thr, mat=1234.0, status="ok", ci=None)
        line = share_mats_text(SimpleNamespace(measured_mats={"p999": sp}))
        (given,) = re.findall(r"--threshold (\S+)`", line)
        assert parse_threshold(given) == thr, (thr, line)
    assert "--threshold 2s`" in line and "--threshold 2.9ms`" not in line


@pytest.mark.compute
def test_the_answer_says_an_error_between_two_same_side_bounds_is_unknown():
    """The answer said 'the predicted MATs were off by mean unknown (both MATs are only
    bounds, ...)': a prediction off by what it cannot know. Such an error is said apart."""
    from shrink.report.sections.answer import _validation_text
    from shrink.validate import Validation

    def check(pst: str, mst: str, err: float) -> dict:
        return {"predicted": 1000.0, "predicted_ci": [None, None], "predicted_status": pst,
                "measured": 1000.0 / (1 + err), "measured_ci": [None, None],
                "measured_status": mst, "measured_bound": None, "error": err,
                "covered": None}  # fmt: skip

    v = Validation(mats={"mean": check("not_reached", "not_reached", 10.67),
                         "p999": check("ok", "ok", 0.05)})  # fmt: skip
    text = _validation_text(v)
    assert "the predicted MATs were off by p99.9 +5.0%;" in text, text
    assert "for mean the error is unknown (both MATs are only bounds, +1067.0% apart)" in text
    assert "off by mean" not in text
