"""Shared fixtures: where the real traces are, and skips with a reason."""

from __future__ import annotations

import os
import shutil
import signal
import tempfile
import weakref
from pathlib import Path
from typing import Any

import pytest
import typer
import typer.testing
from hypothesis import settings

# Tests are deterministic: hypothesis draws the same examples on every run (seeded by
# each test's name), so CI cannot pass or fail by the luck of a draw. A property test
# once failed in one CI run out of many (a quantile a hair under saturation); the
# example it found is pinned in that test.
settings.register_profile("shrink", derandomize=True, database=None)
settings.load_profile("shrink")

# A suite started in the background by a shell without job control inherits SIGINT
# ignored, and so would every shrink it starts: the tests that interrupt one with
# SIGINT would wait out their deadline. An ignored disposition survives exec, a handler
# does not: with Python's own handler here, each child starts with the default again.
if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)


def _command_fingerprint(app: typer.Typer) -> tuple[object, ...]:
    """What typer builds a click command from: the registered callbacks, recursively."""
    groups = tuple(
        (g.name, _command_fingerprint(g.typer_instance))
        for g in app.registered_groups
        if g.typer_instance is not None
    )
    commands = tuple((c.name, id(c.callback)) for c in app.registered_commands)
    return (id(app.registered_callback), commands, groups)


_built: weakref.WeakKeyDictionary[typer.Typer, tuple[tuple[object, ...], Any]] = (
    weakref.WeakKeyDictionary()
)


def _cached_get_command(app: typer.Typer) -> Any:  # typer's (vendored) click Command
    """typer's ``get_command``, built once per app and reused while its commands stay.

    ``CliRunner().invoke`` builds the whole click command tree on every call: every
    command's options from its annotations (``typing.get_type_hints`` evaluates each
    string annotation), 60-80 ms for shrink's app, some 500 times a suite. A click
    command is reusable (each invocation parses into a fresh context), so the tree is
    built again only if an app's registered commands change."""
    key = _command_fingerprint(app)
    hit = _built.get(app)
    if hit is None or hit[0] != key:
        hit = _built[app] = (key, _typer_get_command(app))
    return hit[1]


_typer_get_command = typer.testing._get_command
typer.testing._get_command = _cached_get_command

ROOT = Path(__file__).resolve().parent.parent
# The real traces live outside the project, in ../shared (never copied in).
SHARED = Path(os.environ.get("SHRINK_SHARED", ROOT.parent / "shared"))
REAL = SHARED / "data" / "real"
PUBLISHED = SHARED / "data" / "published"


@pytest.fixture(scope="session")
def real_dir() -> Path:
    if not REAL.is_dir():
        pytest.skip(f"real traces not found at {REAL} (set SHRINK_SHARED to the shared/ folder)")
    return REAL


@pytest.fixture(scope="session")
def published_dir() -> Path:
    if not PUBLISHED.is_dir():
        pytest.skip(f"published figures not found at {PUBLISHED}")
    return PUBLISHED


def require_tool(name: str) -> str:
    path = shutil.which(name)
    if path is None:
        pytest.skip(f"{name} is not installed (make setup installs it as root)")
    return path


def require_lighttpd() -> None:
    """Skip unless lighttpd (looked for in /usr/sbin too, off a user's PATH) and php-cgi are."""
    require_tool("php-cgi")
    if shutil.which("lighttpd", path="/usr/sbin:/usr/bin:/usr/local/sbin") is None:
        pytest.skip("lighttpd is not installed (make setup installs it as root)")


def require_root(why: str = "cgroups, tcpdump") -> None:
    if os.geteuid() != 0:
        pytest.skip(f"needs root ({why}); CI runs as root")


@pytest.fixture
def passable_tmp(tmp_path: Path):
    """A folder every user may pass through to (0711, as are the folders above it), for
    tests of what a testbed's server user may reach: ``tmp_path`` as root (opened by
    ``_server_user_may_enter_tmp_path``). pytest keeps a user's base folder at 0700, so
    as a user it is a fresh folder in the temporary directory, removed afterwards."""
    if os.geteuid() == 0:
        yield tmp_path
        return
    made = Path(tempfile.mkdtemp(prefix="shrink-passable-"))
    try:
        made.chmod(0o711)
        for d in made.parents:
            if not os.stat(d).st_mode & 0o001:
                pytest.skip(f"needs a temporary folder others may pass through ({d} is not)")
        yield made
    finally:
        shutil.rmtree(made, ignore_errors=True)


@pytest.fixture
def machine():
    """This machine, for tests that pin a testbed to it: at least 2 CPUs, all allowed here."""
    from shrink.topology import discover

    m = discover()
    if len(os.sched_getaffinity(0)) < 2 or set(m.all_cpus) - os.sched_getaffinity(0):
        pytest.skip("needs at least 2 CPUs, all allowed to this process")
    return m


# make test's two halves (see the Makefile) select with -m; a module that cannot hold a
# test of its half is not imported at all, which saves each pytest process a few
# seconds of imports and assertion rewriting. Read from the source, so only a module
# that names the marker can hold compute tests, and only one whose every test is
# compute (the module-wide mark) holds none of the rest.
_WHOLE_MODULE = "\npytestmark = pytest.mark.compute\n"


def pytest_ignore_collect(collection_path: Path, config: pytest.Config) -> bool | None:
    half = config.getoption("markexpr")
    if half not in ("compute", "not compute") or not collection_path.name.startswith("test_"):
        return None
    if collection_path.suffix != ".py":
        return None
    source = collection_path.read_text()
    if half == "compute":
        return "pytest.mark.compute" not in source or None
    return _WHOLE_MODULE in source or None


def pytest_configure(config):
    """As root, a testbed's servers run as an unprivileged user (www-data), who must reach
    a document root under tmp_path. pytest keeps /tmp/pytest-of-root at 0700 (and resets
    it whenever another session starts), so a root session gets its own base folder."""
    if os.geteuid() == 0 and config.option.basetemp is None and not hasattr(config, "workerinput"):
        config.option.basetemp = tempfile.mkdtemp(prefix="shrink-pytest-")
        config._shrink_basetemp = config.option.basetemp


def pytest_unconfigure(config):
    made = getattr(config, "_shrink_basetemp", None)
    if made:
        shutil.rmtree(made, ignore_errors=True)


@pytest.fixture(autouse=True)
def _server_user_may_enter_tmp_path(request):
    """Let others pass through (not list: 0711) the folders down to tmp_path, as a user
    would for a real document root: pytest makes them 0700."""
    if os.geteuid() != 0 or "tmp_path" not in request.fixturenames:
        return
    server_user_may_enter(
        request.getfixturevalue("tmp_path"), request.config._tmp_path_factory.getbasetemp()
    )


def server_user_may_enter(folder: Path, top: Path) -> None:
    """As root, let others pass through ``folder`` and the folders above it up to ``top``
    (pytest's base folder): a testbed's server user serves a document root from there."""
    if os.geteuid() != 0:
        return
    for d in (folder, *folder.parents):
        os.chmod(d, os.stat(d).st_mode | 0o011)
        if d == top:
            break
