"""The documentation says what the code does: docs/cli.md is what the code generates,
every `shrink` command shown in README.md and docs/ names a command and options that
exist, and every relative link leads to a file."""

from __future__ import annotations

import re
import shlex
import sys
from pathlib import Path

import pytest
import typer

from shrink.cli import app
from tests.conftest import ROOT

sys.path.insert(0, str(ROOT / "scripts"))

import gen_cli_reference

pytestmark = pytest.mark.compute

PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
# Written by the set-up work on its own branch; checked like any other once it is here.
NOT_YET = {ROOT / "docs" / "install.md"}


def test_the_cli_reference_is_what_the_code_generates():
    expected = gen_cli_reference.reference()
    assert (ROOT / "docs" / "cli.md").read_text() == expected, (
        "docs/cli.md is out of date: run python scripts/gen_cli_reference.py"
    )
    # Every command is in it, with its options.
    assert "## `shrink predict`" in expected and "`--thresholds <str>`" in expected
    assert "## `shrink sim mappings`" in expected


def test_the_reference_follows_an_option_the_code_gains():
    """A new option shows in the reference: the generator reads the app, not a copy."""
    extra = typer.Typer()

    @extra.command()
    def probe(
        rate: float = typer.Option(2.0, "--rate", help="Requests per second."),
    ) -> None:
        """Probe the server."""

    text = gen_cli_reference.reference(extra)
    assert "Probe the server." in text
    assert "- `--rate <float>`: Requests per second. [default: 2.0]" in text


def _shown_commands(text: str) -> list[str]:
    """The `shrink ...` command lines of a page's code blocks (continuations joined)."""
    lines = []
    for block in re.findall(r"```[a-z]*\n(.*?)```", text, flags=re.S):
        joined = re.sub(r"\\\n\s*", " ", block)
        for line in joined.splitlines():
            line = line.strip().removeprefix("$ ")
            if line.startswith("shrink "):
                lines.append(line.split(" #")[0].split(" || ")[0])
    return lines


def _options_of(words: list[str]) -> tuple[str, set[str]]:
    """The command a line names (its path) and the options that command takes."""
    cmd = typer.main.get_command(app)
    path = ["shrink"]
    for word in words[1:]:
        sub = cmd.get_command(None, word) if hasattr(cmd, "list_commands") else None
        if sub is None:
            break
        cmd, path = sub, [*path, word]
    ctx = cmd.context_class(cmd, info_name=path[-1])
    opts = {o for p in cmd.get_params(ctx) for o in (*p.opts, *p.secondary_opts)}
    return " ".join(path), opts


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_every_command_shown_names_options_that_exist(page: Path):
    if page.name == "cli.md":
        return  # generated from the options themselves
    wrong = []
    for line in _shown_commands(page.read_text()):
        words = shlex.split(line)
        path, opts = _options_of(words)
        if path == "shrink" and not all(w.startswith("-") for w in words[1:]):
            wrong.append(f"{line}: no such command")
        wrong += [
            f"{line}: {path} has no {w}"
            for w in words
            if w.startswith("-") and w.split("=")[0] not in opts | {"--help"}
        ]
    assert not wrong, "\n".join(wrong)


def test_the_readme_and_the_tour_show_commands():
    """The check above has something to check where it matters most."""
    readme = _shown_commands((ROOT / "README.md").read_text())
    assert any(line.startswith("shrink predict ") for line in readme)
    assert len(_shown_commands((ROOT / "docs" / "tour.md").read_text())) > 15


def test_a_wrong_option_is_caught():
    path, opts = _options_of(shlex.split("shrink predict t.parquet --alpah 0.25"))
    assert path == "shrink predict" and "--alpha" in opts and "--alpah" not in opts


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_every_relative_link_leads_to_a_file(page: Path):
    missing = []
    for target in re.findall(r"\]\(([^)#]+)(?:#[^)]*)?\)", page.read_text()):
        if re.match(r"[a-z]+:", target):
            continue  # a URL
        path = (page.parent / target).resolve()
        if not path.exists() and path not in NOT_YET:
            missing.append(target)
    assert not missing, f"{page.name}: {missing}"


def _accuracy_table(text: str) -> list[str]:
    start = text.index("| configuration | runs | mean-threshold error |")
    return text[start:].split("\n\n")[0].splitlines()


def test_results_open_with_the_current_figures_and_the_readme_shows_them():
    results = (ROOT / "bench" / "RESULTS.md").read_text()
    headings = re.findall(r"^#{1,2} (.+)$", results, flags=re.M)
    assert headings[:2] == ["Results", "Current figures"], headings[:3]
    assert headings.index("Archive") > headings.index("Current figures")
    current = results.split("\n# Archive\n")[0]
    readme = (ROOT / "README.md").read_text()
    assert _accuracy_table(readme) == _accuracy_table(current)
    assert "python bench/bench_fidelity.py" in readme and "bench/RESULTS.md" in readme


def test_the_tcp_files_size_is_named_in_binary_units():
    """'1 KB' (1,000 bytes) named a file of 1,024 bytes; the README says 1 KiB."""
    text = (ROOT / "docs" / "cli.md").read_text()
    assert "1 KB" not in text and "static 1 KiB file (1,024 bytes)" in text


def test_the_tour_states_the_demos_time_budgets():
    """The tour said the demo's sweep started no level past 475 s; the demo's budget
    had become 250 s for the share's sweep and 40 s for the whole core's search."""
    from shrink import demo

    text = " ".join((ROOT / "docs" / "tour.md").read_text().split())
    assert f"starts no level past {demo.SWEEP_BUDGET_S:.0f} s" in text
    assert f"none past {demo.VALIDATION_BUDGET_S:.0f} s more" in text


def test_the_demos_help_names_the_command_the_tour_gives(capsys):
    """`python -m shrink.demo --help` began "usage: demo.py", no command one can run."""
    from shrink import demo

    with pytest.raises(SystemExit) as stop:
        demo.main(["--help"])
    assert stop.value.code == 0
    assert capsys.readouterr().out.startswith("usage: python -m shrink.demo ")


def test_method_names_prediction_keys_as_the_file_has_them():
    """method.md named `extra.full_target_use`, the Python attribute's path; in
    prediction.json the key is `full_target_use` (test_predict reads it there)."""
    text = (ROOT / "docs" / "method.md").read_text()
    assert "`full_target_use`" in text and "extra." not in text


def test_the_cluster_forms_cluster_md_gives_are_in_the_options_help():
    """cluster.md offers ray:local (and the root refusal of ray:auto points to it); the
    --cluster help named only ray:auto and ray://."""
    guide = (ROOT / "docs" / "cluster.md").read_text()
    reference = (ROOT / "docs" / "cli.md").read_text()
    for form in ("ray:auto", "ray:local"):
        assert form in guide and form in reference.split("`--cluster <str>`")[1], form


def test_the_readme_places_the_host_check_where_the_report_has_it():
    """The README listed the host's steadiness "over the sweep" among every report's
    checks; the report has that row only with a full-scale run (shrink.selfchecks)."""
    from shrink.report.sections import self_checks

    assert self_checks._host_items({}) == []  # no full-scale run, no host row
    text = " ".join((ROOT / "README.md").read_text().split())
    assert "when there was a full-scale run, whether the host's speed held steady" in text


def test_calibrate_is_described_with_options_it_has():
    """simulator.md gave `shrink calibrate` the papers' fit as `--calibration published`,
    an option of whatif's; calibrate takes curves, and none means that fit."""
    text = " ".join((ROOT / "docs" / "simulator.md").read_text().split())
    _, calibrate = _options_of(["shrink", "calibrate"])
    _, whatif = _options_of(["shrink", "whatif"])
    assert "--calibration" not in calibrate and "--calibration" in whatif
    assert "`whatif --calibration published`" in text
