"""The CLI starts at once: what it imports, and the one command it builds (no timing).

``bench/bench_cli.py`` measures the time; these tests guard its causes: importing
the CLI, and running ``--help``, ``--version`` or a usage error, load none of the
heavy libraries, and :func:`shrink.cli.app_for` builds only the command named.
"""

from __future__ import annotations

import subprocess
import sys

import pytest
import typer

from shrink.cli import app, app_for
from tests.conftest import ROOT

pytestmark = pytest.mark.compute

HEAVY = (
    "numpy",
    "pyarrow",
    "pydantic",
    "scipy",
    "matplotlib",
    "httpx",
    "sklearn",
    "scapy",
    "ray",
    "uvloop",
    "shrink.trace",
    "shrink.replay",
    "shrink.testbed",
)


def _loaded_after(code: str) -> list[str]:
    """The heavy modules in ``sys.modules`` after running ``code`` in a fresh interpreter."""
    probe = f"import sys\n{code}\nprint('loaded:', *(m for m in {HEAVY!r} if m in sys.modules))"
    r = subprocess.run(
        [sys.executable, "-c", probe], cwd=ROOT, capture_output=True, text=True, timeout=60
    )
    assert r.returncode == 0, r.stderr
    return r.stdout.rpartition("loaded:")[2].split()


def test_importing_the_cli_loads_no_heavy_library() -> None:
    assert _loaded_after("import shrink.cli") == []


@pytest.mark.parametrize(
    "args",
    [["--help"], ["--version"], ["--no-such-option"], ["replay", "--no-such-option"], []],
    ids=["help", "version", "usage error", "usage error in a command", "no arguments"],
)
def test_help_version_and_usage_errors_load_no_heavy_library(args: list[str]) -> None:
    run = f"from shrink.cli import main\ntry:\n    main({args!r})\nexcept SystemExit:\n    pass"
    assert _loaded_after(run) == []


def test_the_public_trace_names_load_on_first_use() -> None:
    assert _loaded_after("import shrink") == []
    assert "numpy" in _loaded_after("import shrink\nshrink.Trace")


def _tree(group: typer.Typer) -> dict[str, object]:
    cmd = typer.main.get_command(group)
    out: dict[str, object] = {}

    def walk(c: object, path: str) -> None:
        out[path] = (c.help, sorted(p.name for p in c.params))  # type: ignore[attr-defined]
        for name, sub in getattr(c, "commands", {}).items():
            walk(sub, f"{path} {name}".strip())

    walk(cmd, "")
    return out


def test_only_the_named_command_is_built_and_all_are_listed() -> None:
    full = _tree(app)
    for args, built in ((["replay", "x.parquet"], "replay"), (["--json", "testbed"], "testbed")):
        pruned = _tree(app_for(args))
        assert pruned.keys() == full.keys()  # every command is listed, with its help
        for path in full:
            help_full, params_full = full[path]  # type: ignore[misc]
            help_pruned, params_pruned = pruned[path]  # type: ignore[misc]
            assert help_pruned == help_full, path
            if path.split(" ")[0] == built or path == "":
                assert params_pruned == params_full, path
            elif params_full:
                assert params_pruned == [], path  # listed only: no options built
    assert _tree(app_for(["--help"]))[""] == full[""]


def test_completing_a_word_builds_every_command(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("_SHRINK_COMPLETE", "complete_bash")
    assert app_for([]) is app


def test_the_testbed_defaults_are_the_libraries() -> None:
    from shrink.cli import testbed_cmd
    from shrink.enforce import DEFAULT
    from shrink.testbed.command import MAX_WORKERS_PER_CORE
    from shrink.testbed.config import PHP_CHILDREN_PER_CORE
    from shrink.testbed.lifecycle import CGROUPS

    assert testbed_cmd.DEFAULT_ENFORCE == DEFAULT
    assert testbed_cmd.PHP_CHILDREN_PER_CORE == PHP_CHILDREN_PER_CORE
    assert testbed_cmd.MAX_WORKERS_PER_CORE == MAX_WORKERS_PER_CORE
    assert testbed_cmd.CGROUPS == CGROUPS


def test_shell_completion_is_offered() -> None:
    from typer.testing import CliRunner

    r = CliRunner().invoke(app, ["--help"])
    assert "--install-completion" in r.output and "--show-completion" in r.output
