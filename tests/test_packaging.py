"""The distribution's name, the lock files and the version line agree with pyproject.toml."""

from __future__ import annotations

import re
import tomllib

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from typer.testing import CliRunner

from shrink._version import DISTRIBUTION, __version__
from shrink.cli import app
from tests.conftest import ROOT

pytestmark = pytest.mark.compute

PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]


def _lock(name: str) -> dict[str, str]:
    """``{package: version}`` of a lock file; every pin carries the hashes of its files."""
    text = (ROOT / name).read_text()
    pins = re.findall(r"^([A-Za-z0-9_.-]+)==([^ ;\\\n]+)[^\n]*\\\n\s+--hash=sha256:", text, re.M)
    every = re.findall(r"^[A-Za-z0-9_.-]+==", text, re.M)
    assert len(pins) == len(every), f"{name}: a pin without hashes"
    return {canonicalize_name(n): v for n, v in pins}


def test_the_distribution_has_a_name_of_its_own() -> None:
    # the index's "shrink" is an unrelated minifier: pip install shrink installs that
    assert PYPROJECT["name"] == DISTRIBUTION != "shrink"
    assert PYPROJECT["version"] == __version__


def test_the_version_line_names_the_distribution() -> None:
    r = CliRunner().invoke(app, ["--version"])
    assert r.exit_code == 0 and r.output == f"{DISTRIBUTION} {__version__}\n"


def test_every_install_line_names_the_distribution() -> None:
    files = [ROOT / "README.md", *(ROOT / "docs").glob("*.md"), *(ROOT / "shrink").rglob("*.py")]
    named = []
    for f in files:
        for m in re.finditer(r"pip install '?([A-Za-z0-9_.-]+)\[", f.read_text()):
            named.append((f.name, m.group(1)))
    assert named and all(name == DISTRIBUTION for _, name in named), named


def test_the_cluster_help_shows_the_extra() -> None:
    r = CliRunner().invoke(app, ["replay", "--help"], terminal_width=200)
    # (rich wraps the help where it likes, at a hyphen too)
    assert f"pipinstall'{DISTRIBUTION}[ray]'" in "".join(r.output.split())


@pytest.mark.parametrize(
    ("lock", "extras"), [("requirements.lock", ()), ("requirements-dev.lock", ("dev",))]
)
def test_the_lock_pins_every_dependency_within_its_bounds(lock: str, extras: tuple[str]) -> None:
    pins = _lock(lock)
    wanted = [Requirement(r) for r in PYPROJECT["dependencies"]]
    for extra in extras:
        wanted += [Requirement(r) for r in PYPROJECT["optional-dependencies"][extra]]
    for req in wanted:
        version = pins.get(canonicalize_name(req.name))
        assert version is not None, f"{lock} lacks {req.name}"
        assert req.specifier.contains(version, prereleases=True), f"{lock}: {req.name} {version}"


def test_the_users_install_is_the_dev_install_less_its_tools_and_ray() -> None:
    user, dev = _lock("requirements.lock"), _lock("requirements-dev.lock")
    assert "ray" in dev and "ray" not in user  # Ray is the [ray] extra, not the default
    assert {n: dev.get(n) for n in user} == user  # the same versions
