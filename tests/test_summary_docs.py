"""Every field of the --json summaries of replay and sweep is said in docs/formats.md:
generator_lost, awake_spinners, awake_group, generator_stopped and p999_requests were
added to them with no word anywhere in the docs of what they mean."""

from __future__ import annotations

import ast
import inspect
import re
from pathlib import Path

import pytest

DOCS = Path(__file__).resolve().parents[1] / "docs" / "formats.md"


def _dict_keys(func: object) -> set[str]:
    """The string keys of the dict literals in ``func`` and the keys it sets by
    subscript (``summary["realtime"] = ...``, ``r["p999_requests"] = ...``)."""
    tree = ast.parse(inspect.getsource(func))  # type: ignore[arg-type]
    keys: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Dict):
            keys |= {k.value for k in node.keys if isinstance(k, ast.Constant)}
        elif isinstance(node, ast.Assign):
            for t in node.targets:
                if isinstance(t, ast.Subscript) and isinstance(t.slice, ast.Constant):
                    keys.add(t.slice.value)
    return {k for k in keys if isinstance(k, str) and re.fullmatch(r"[a-z_0-9]+", k)}


def _section() -> str:
    text = DOCS.read_text()
    start = text.index("## Command summaries (`--json`)")
    return text[start : text.index("\n## ", start + 1)]


@pytest.mark.compute
def test_each_replay_summary_field_is_documented() -> None:
    from shrink.cli import replay_cmd

    keys = _dict_keys(replay_cmd._summary) | _dict_keys(replay_cmd.replay)
    assert {"generator_lost", "awake_group", "realtime", "lag_limit"} <= keys
    section = _section()
    missing = sorted(k for k in keys if f"`{k}`" not in section)
    assert not missing, f"not in docs/formats.md: {missing}"


@pytest.mark.compute
def test_each_sweep_level_field_is_documented() -> None:
    from shrink.cli import sweep_cmd

    keys = _dict_keys(sweep_cmd._print_sweep)
    assert {"p999_requests", "other_cpu", "stopped"} <= keys
    section = _section()
    missing = sorted(k for k in keys if f"`{k}`" not in section)
    assert not missing, f"not in docs/formats.md: {missing}"
