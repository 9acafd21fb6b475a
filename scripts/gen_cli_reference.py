"""Write docs/cli.md, the command-line reference, from the ``shrink`` Typer app itself.

    python scripts/gen_cli_reference.py          # writes docs/cli.md
    python scripts/gen_cli_reference.py --check  # exit 1 if docs/cli.md is out of date

Every command and group is walked through the Click command Typer builds (Typer
vendors its own Click, so the walk goes by the objects' attributes, not Click's
classes), so the
reference says what ``shrink CMD --help`` says: the usage line, the help text, and
each argument and option as ``--help`` lists it. ``tests/test_docs.py`` checks
that regenerating gives the file's text.
"""

from __future__ import annotations

import argparse
import inspect
import sys
from pathlib import Path
from typing import Any

import typer

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "docs" / "cli.md"

HEADER = """# Command-line reference

Generated from the code by `python scripts/gen_cli_reference.py`; do not edit by hand.
Every command also answers `--help`. Conventions (exit status, durations, statistics)
are in [semantics.md](semantics.md#conventions).
"""


def _plain(text: str | None) -> str:
    """Help text as Markdown: Rich's escaped brackets unescaped, paragraphs kept."""
    if not text:
        return ""
    text = inspect.cleandoc(text).replace("\\[", "[")
    # Click's \b marks a paragraph it must not rewrap; Markdown needs no mark.
    return "\n".join(line for line in text.splitlines() if line.strip() != "\b").strip()


def _param_line(param: Any, ctx: Any) -> str:
    """One argument or option as ``--help`` lists it: names, value type, help, default."""
    record = param.get_help_record(ctx)
    if record is None:
        return ""
    decl, help_text = record
    help_text = " ".join(_plain(help_text).split())
    return f"- `{decl}`: {help_text}" if help_text else f"- `{decl}`"


def _command(cmd: Any, path: list[str], parent: Any) -> list[str]:
    ctx = cmd.context_class(cmd, info_name=path[-1], parent=parent)
    title = " ".join(path)
    lines = [f"## `{title}`", ""]
    pieces = " ".join(cmd.collect_usage_pieces(ctx))
    lines += [f"Usage: `{title} {pieces}`".rstrip(" `") + "`", ""]
    if cmd.help:
        lines += [_plain(cmd.help), ""]
    params = [
        p
        for p in cmd.get_params(ctx)
        if not getattr(p, "hidden", False) and p.name not in ("help",)
    ]
    rows = [line for p in params if (line := _param_line(p, ctx))]
    if rows:
        lines += [*rows, ""]
    if hasattr(cmd, "list_commands"):
        subs = [name for name in cmd.list_commands(ctx) if not cmd.get_command(ctx, name).hidden]
        if subs:
            lines += ["Commands: " + ", ".join(f"`{title} {s}`" for s in subs) + ".", ""]
        for name in subs:
            lines += _command(cmd.get_command(ctx, name), [*path, name], ctx)
    return lines


def reference(app: Any | None = None) -> str:
    """The Markdown reference of ``app`` (the ``shrink`` app by default)."""
    if app is None:
        from shrink.cli import app
    cmd = typer.main.get_command(app)
    text = "\n".join([HEADER, *_command(cmd, ["shrink"], None)])
    return text.rstrip() + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="exit 1 if docs/cli.md is stale")
    args = ap.parse_args(argv)
    text = reference()
    if args.check:
        if not OUT.exists() or OUT.read_text() != text:
            print(f"{OUT.relative_to(ROOT)} is out of date: run {Path(__file__).name}")
            return 1
        return 0
    OUT.write_text(text)
    print(f"wrote {OUT.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
