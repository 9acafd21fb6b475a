"""A TOML input whose dotted keys nest a table thousands of levels deep (a.a.a... = 1:
25 KB, 3,000 levels, which tomllib reads without recursing) stopped ``testbed up
--server RECIPE`` with 'internal error (RecursionError ... while getting the repr of an
object)', exit 70, when the recipe's error message printed the value. A TOML document
nested past 64 levels is now refused by the reader, naming the file. Found by the fuzz
campaign's recipe reader (seed 25, input 31,328)."""

from __future__ import annotations

from pathlib import Path

import pytest

from shrink import files
from shrink.errors import RecipeError, TraceFormatError
from shrink.testbed.command import CommandRecipe

pytestmark = pytest.mark.compute


def _recipe(path: Path, levels: int) -> Path:
    deep = ".".join(["a"] * levels)
    path.write_text(
        'commands = [["python3", "-m", "http.server", "{port}"]]\n'
        f'versions = {{ {deep} = ["python3", "--version"] }}\n'
    )
    return path


def test_a_recipe_nested_thousands_of_levels_deep_is_one_line(tmp_path):
    path = _recipe(tmp_path / "r.toml", 3000)
    with pytest.raises(RecipeError) as info:
        CommandRecipe.read(path)
    assert str(info.value) == (f"recipe {path}: not a recipe file: nested more than 64 levels deep")


def test_a_toml_nested_to_the_bound_is_read(tmp_path):
    # 64 levels: the document, the versions table, the 61 tables of 62 dotted keys and
    # the list (its strings are no level)
    doc = files.read_toml(_recipe(tmp_path / "r.toml", 62))
    assert doc["versions"]
    with pytest.raises(TraceFormatError, match="nested more than 64 levels deep"):
        files.read_toml(_recipe(tmp_path / "r.toml", 63))
