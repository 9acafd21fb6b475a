"""Running shrink's commands in-process from tests."""

from __future__ import annotations

from pathlib import Path

from typer.testing import CliRunner

from shrink.cli import app

ROOT = Path(__file__).resolve().parents[2]
# The example two-socket machine the simulator's predictions run on.
SPEC = ROOT / "examples" / "machines" / "nehalem-2s.toml"


def cli_ok(*args: str) -> None:
    """Run ``shrink ARGS``; it must succeed (0, or 99 for a MAT that is only a bound)."""
    r = CliRunner().invoke(app, list(args))
    assert r.exit_code in (0, 99), r.output
