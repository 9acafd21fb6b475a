"""Names reach the terminal escaped: CR, LF and ANSI escapes in a file name are shown,
not obeyed, in errors' str() and in the CLI's error line."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from shrink.errors import TraceFormatError, WriteError, printable

pytestmark = pytest.mark.compute

ROOT = Path(__file__).resolve().parents[1]
NASTY = "x\x1b[2J\x1b[31mred\rfake line\nerror: forged\x07.parquet"


def test_printable_escapes_control_characters_only():
    assert printable("a\x1b[31mb\r\nc\td\x7f\x9b") == "a\\x1b[31mb\\r\\nc\\td\\x7f\\u009b"
    assert printable("café / naïve ünïcode ok") == "café / naïve ünïcode ok"
    assert printable("zero\u200bwidth\u2028line") == "zero\\u200bwidth\\u2028line"


def test_a_c1_control_and_a_byte_that_is_not_utf8_are_said_apart():
    """A name's byte 0x9b that is not UTF-8 is said \\x9b (since it was \\udc9b); the
    character U+009B (the bytes c2 9b, valid UTF-8) was said \\x9b too: two names, one
    line, and $'\\x9b' typed back the other one."""
    byte, char = os.fsdecode(b"n\x9b"), os.fsdecode(b"n\xc2\x9b")
    assert printable(byte) == "n\\x9b"
    assert printable(char) == "n\\u009b"


def test_characters_a_terminal_draws_as_nothing_or_a_blank_are_said_escaped():
    """Default-ignorable characters Python counts printable (a Hangul filler, a variation
    selector, a combining grapheme joiner, a tag) were printed as they are: "a\u3164b"
    showed as "a b" and "x\ufe00" as "x", names a user could not type back. Bidi
    controls and every C0/C1 control, U+2028/U+2029 were escaped already."""
    assert printable("a\u3164b") == "a\\u3164b"
    assert printable("x\ufe00.parquet") == "x\\ufe00.parquet"
    assert printable("a\u034fb\U000e0041") == "a\\u034fb\\U000e0041"
    assert printable("r\u202eteuqrap.txt\u2066\u2069") == "r\\u202eteuqrap.txt\\u2066\\u2069"
    assert printable("日本 é ❤") == "日本 é ❤"  # (what draws as itself, as it is)
    for cp in [*range(0x20), 0x7F, *range(0x80, 0xA0), 0x2028, 0x2029, 0xAD, 0xFEFF]:
        assert chr(cp) not in printable(f"a{chr(cp)}b"), hex(cp)


@pytest.mark.parametrize(
    "err",
    [TraceFormatError("bad", path=NASTY, line=3), WriteError(NASTY, OSError(28, "full"))],
)
def test_errors_str_is_escaped(err):
    text = str(err)
    assert "\x1b" not in text and "\r" not in text and "\n" not in text and "\x07" not in text
    assert "\\x1b[31mred\\rfake line\\nerror: forged\\x07" in text


def test_the_cli_error_line_is_escaped(tmp_path):
    bad = tmp_path / NASTY
    bad.write_bytes(b"not parquet")
    out = subprocess.run(
        [sys.executable, "-m", "shrink", "trace", "info", str(bad)],
        env={**os.environ, "PYTHONPATH": str(ROOT)}, capture_output=True, timeout=60,
    )  # fmt: skip
    assert out.returncode == 1
    err = out.stderr.decode()
    assert "\x1b[2J" not in err and "\r" not in err and "\x07" not in err
    assert len(err.strip().splitlines()) == 1 and "\\x1b[31mred\\rfake line\\n" in err


HOSTILE = [
    "<script>alert(1)</script>",
    '"><img src=x onerror=alert(2)>',
    "</style><b>x</b>",
    "a|b|c",
    "[l](javascript:alert(3))",
    "![i](javascript:alert(4))",
    "<javascript:alert(5)>",
    "\\<script>alert(6)</script>",
    "\\[m\\](javascript:alert(7))",
    "line\n# heading\r\n| x | y |\r> quote",
    "esc\x1b[31mred\x00nul\x07",
]


def test_the_report_shows_names_and_obeys_none_of_them(tmp_path):
    # A machine's name went into report.md raw: its HTML stayed HTML, "|" cut the
    # provenance table's row into more columns, "](javascript:" made a link, a line
    # break began a heading, and ESC reached a terminal that showed the file.
    from markdown_it import MarkdownIt

    from shrink.report.blocks import Doc, render_html, render_markdown

    doc = Doc("report")
    for name in HOSTILE:
        doc.p(f"Maximum achievable throughput of {name} per mapping.")
        doc.table(["what", "value"], [["machine", name], ["alpha", "0.5"]])
        doc.ul([f"on {name}"])
        doc.note(f"**1-replica** on `{name}`")
    md = render_markdown(doc)
    page = MarkdownIt("commonmark").enable("table").render(md)
    for shown in (page, render_html(doc)):
        tags = set(re.findall(r"</?([a-z][a-z0-9]*)", shown.lower()))
        assert tags <= {"h1", "p", "table", "thead", "tbody", "tr", "th", "td", "ul", "li",
                        "blockquote", "strong", "code", "html", "head", "meta", "title",
                        "style", "body"}, tags  # fmt: skip
        assert shown.count("<style>") <= 1 and shown.count("</style>") <= 1
        assert "\x1b" not in shown and "\x00" not in shown and "\x07" not in shown
    assert page.count("<table>") == len(HOSTILE) and page.count("<blockquote>") == len(HOSTILE)
    rows = re.findall(r"<tr>(.*?)</tr>", page, flags=re.S)
    assert all(r.count("<td>") == 2 or r.count("<th>") == 2 for r in rows), rows
    assert "a|b|c" in page and "alert(3)" in page and "\\x1b[31mred" in page


def test_a_dollar_in_a_name_is_no_formula_in_report_md():
    """GitHub renders ``$...$`` and ``$$...$$`` in Markdown as math: a trace named
    ``$x^2$.parquet`` showed a formula. Every ``$`` is escaped (after an even run of
    backslashes, the name's own doubled), and CommonMark shows the name as it is."""
    import html

    from markdown_it import MarkdownIt

    from shrink.report.blocks import Doc, render_markdown

    names = ["$x^2$.parquet", "m$$a$$", "\\$y$", "cost $5 | $6"]
    doc = Doc(f"Capacity of {names[0]}")
    for name in names:
        doc.h(1, name)
        doc.p(f"Maximum achievable throughput of {name}.")
        doc.table(["what", "value"], [["machine", name]])
        doc.ul([f"class {name}"])
        doc.note(f"on {name}")
        doc.img("fig.png", f"latency of {name}", alt=name)
    md = render_markdown(doc)
    for m in re.finditer(r"(\\*)\$", md):
        assert len(m.group(1)) % 2 == 1, md[max(0, m.start() - 20) : m.end() + 20]
    page = MarkdownIt("commonmark").enable("table").render(md)
    for name in names:
        assert page.count(html.escape(name, quote=False)) >= 6, name


def _clean(text: str) -> bool:
    return not any(c in text for c in "\x1b\r\x07") and "\nerror: forged" not in text


def test_the_replay_summary_shows_the_run_logs_name_escaped(capsys):
    """replay's summary printed its -o name raw ("N requests -> NAME"): CR and LF reached
    the terminal."""
    from shrink.cli.replay_cmd import _print_summary, _say_stopped

    lat = dict.fromkeys(("mean", "p50", "p99", "p999"), 0.001)
    summary = {
        "requests": 10, "runlog": NASTY, "engine": "native", "intended_rate": 10.0,
        "achieved_rate": 10.0, "throughput": 10.0, "errors": 0, "failures": {},
        "latency": lat, "send_lag_p50": 0.0, "send_lag_p99": 0.0, "generator_cpu": None,
        "utilization": None, "generator_behind": False, "failed": False, "interrupted": True,
        "awake_spinners": None,
    }  # fmt: skip
    _print_summary(summary)
    _say_stopped(summary)
    got = capsys.readouterr()
    shown = "\\x1b[31mred\\rfake line\\nerror: forged"
    # the summary on stdout, the line a stop gets on stderr: each escaped
    assert _clean(got.out) and got.out.count(shown) == 1
    assert _clean(got.err) and got.err.count(shown) == 1


def test_testbed_ups_stop_line_shows_the_state_escaped_and_quoted_for_bash(tmp_path):
    """``testbed up --state NAME`` printed "state: NAME   stop with: ... --state 'NAME'"
    raw; the command to paste is now $'...', which bash reads back as the same name."""
    from shrink.cli.testbed_cmd import shell_word

    for name in (NASTY, "it's a \\ name\n.json", "plain name.json"):
        word = shell_word(name)
        assert _clean(word) and "\n" not in word
        back = subprocess.run(["bash", "-c", f"printf %s {word}"], capture_output=True)
        assert back.stdout.decode() == name


def test_sweeps_summary_shows_the_curves_and_exports_names_escaped(capsys):
    """sweep printed "curve: NAME" and "also: NAME-hdr, ..." raw."""
    from helpers.curves import mm1_curve

    from shrink.cli.sweep_cmd import _print_sweep

    curve = mm1_curve([10.0, 20.0], 100.0, reps=1, n=50)
    _print_sweep(curve, "rate", Path(NASTY), [Path(NASTY + "_stats.csv")], False)
    out = capsys.readouterr().out
    assert _clean(out) and out.count("\\x1b[31mred\\rfake line\\nerror: forged") == 2


@pytest.mark.parametrize("locale", ["C", "C.UTF-8"])
def test_the_stop_lines_word_holds_the_names_bytes_in_any_locale(locale):
    """A state whose name held the byte 0xff (no UTF-8: read as U+DCFF) was quoted as
    $'...\\udcff...', which bash reads back as three other bytes; and a zero-width space
    as $'\\u200b', which bash under LC_ALL=C keeps as six characters of text: the command
    to paste named a file that is not there."""
    from shrink.cli.testbed_cmd import shell_word

    for raw in (b"st\xff\n.json", "caf\u00e9\u200b\r.json".encode(), b"a'\\\x1b.json"):
        word = shell_word(os.fsdecode(raw))
        assert _clean(word) and "\n" not in word
        env = {**os.environ, "LC_ALL": locale}
        back = subprocess.run(["bash", "-c", f"printf %s {word}"], capture_output=True, env=env)
        assert back.stdout == raw, word


def test_a_parquet_file_whose_name_is_not_utf8_reads_back(tmp_path):
    """Linux names a file with any bytes: `synth tcp -o $'t\\xff.parquet'` wrote the trace,
    and then every command refused it as "not a readable Parquet trace ('utf-8' codec
    can't encode ...)": pyarrow encodes a name as UTF-8. A replay's RunLog there was
    written and then read back with an internal error (the same reader)."""
    from shrink.parquet_read import read_bounded, schema_of
    from shrink.trace import Trace

    trace = Trace.from_columns({"session": [1, 2], "t": [0.0, 0.5], "path": ["/a", "/b"]})
    path = tmp_path / os.fsdecode(b"t\xff\x1b.parquet")
    trace.write_parquet(path)
    assert len(Trace.read_parquet(path)) == 2
    assert read_bounded(path).num_rows == 2
    assert schema_of(path).names == read_bounded(path).column_names


def test_a_names_byte_that_is_not_utf8_is_printed_as_that_byte(tmp_path):
    """`sample T --alpha 0.5 -o $'o\\xfe.parquet'` said "o\\udcfe.parquet: kept ...":
    Python's stand-in for the byte, which neither `ls -b` nor bash's $'...' writes (the
    name could not be typed back); the byte is now said as \\xfe."""
    from typer.testing import CliRunner

    from shrink.cli import app

    assert printable(os.fsdecode(b"o\xfe\x1b.parquet")) == "o\\xfe\\x1b.parquet"
    assert printable("caf\u00e9 \u00fe") == "caf\u00e9 \u00fe"  # (real letters stay)
    trace = tmp_path / "t.parquet"
    out = tmp_path / os.fsdecode(b"o\xfe.parquet")
    r = CliRunner().invoke(
        app, ["synth", "tcp", "--rate", "100", "--duration", "1s", "-o", str(trace)]
    )
    assert r.exit_code == 0, r.output
    r = CliRunner().invoke(app, ["sample", str(trace), "--alpha", "0.5", "-o", str(out)])
    assert r.exit_code == 0, r.output
    assert "o\\xfe.parquet: kept" in r.output and "udc" not in r.output, r.output
