"""Outside the CLI, no function of shrink/ takes more than 10 parameters.

A function that needs more takes a settings value (a frozen dataclass named from
the field: ``PredictConfig``, ``TargetSettings``, ``ServerSettings``,
``GeneratorPlacement``). The CLI's commands are exempt: typer reads their
options from their parameters. The parameters are read from the source with
:mod:`ast` (positional and keyword-only, ``self`` and ``cls`` not counted), nothing
is imported.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

pytestmark = pytest.mark.compute

ROOT = Path(__file__).resolve().parent.parent
LIMIT = 10


def wide_functions(root: Path = ROOT, package: str = "shrink") -> dict[str, int]:
    """``{"path:line:name": parameters}`` for every function over LIMIT parameters under
    ``package``, its ``cli`` folder left out."""
    out = {}
    for path in sorted((root / package).rglob("*.py")):
        rel = path.relative_to(root)
        if rel.parts[1] == "cli":
            continue
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                args = node.args
                names = [a.arg for a in (*args.posonlyargs, *args.args, *args.kwonlyargs)]
                if names and names[0] in ("self", "cls"):
                    names = names[1:]
                if len(names) > LIMIT:
                    out[f"{rel.as_posix()}:{node.lineno}:{node.name}"] = len(names)
    return out


def test_the_scan_counts_positional_and_keyword_only_parameters(tmp_path: Path) -> None:
    (tmp_path / "pkg" / "cli").mkdir(parents=True)
    eleven = ", ".join(f"a{i}" for i in range(6)) + ", *, " + ", ".join(f"k{i}" for i in range(5))
    ten = ", ".join(f"a{i}" for i in range(10))
    (tmp_path / "pkg" / "m.py").write_text(
        f"def wide({eleven}):\n    pass\n\n\n"
        f"class C:\n    def method(self, {ten}):\n        pass\n\n\n"
        f"def narrow({ten}):\n    pass\n"
    )
    # A command's options are its parameters: the CLI is not scanned.
    (tmp_path / "pkg" / "cli" / "cmd.py").write_text(f"def command({eleven}):\n    pass\n")
    assert wide_functions(tmp_path, "pkg") == {"pkg/m.py:1:wide": 11}


def test_no_function_outside_the_cli_takes_more_than_10_parameters() -> None:
    wide = wide_functions()
    assert not wide, f"functions over {LIMIT} parameters (take a settings value): {wide}"
