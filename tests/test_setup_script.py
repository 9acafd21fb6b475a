"""scripts/setup.sh without root on a stock Debian (no python3-venv): it listed the
missing packages, said it was "continuing" and that tests would skip, and then failed
making the virtual environment every make target runs in."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

SETUP = Path(__file__).resolve().parents[1] / "scripts" / "setup.sh"


def _shim(bin_dir: Path, name: str, body: str) -> None:
    path = bin_dir / name
    path.write_text(f"#!/bin/sh\n{body}\n")
    path.chmod(0o755)


def _run_as_user_without_debs(
    tmp_path: Path, python_body: str, dpkg_query: str = "exit 1", python: str | None = None
) -> subprocess.CompletedProcess:
    """setup.sh in a copy of the tree, as uid 1000, with no Debian package installed
    (or what ``dpkg_query`` says) and PYTHON a stand-in whose behaviour is ``python_body``."""
    if shutil.which("bash") is None:
        pytest.skip("needs bash")
    tree = tmp_path / "tree"
    (tree / "scripts").mkdir(parents=True)
    shutil.copy(SETUP, tree / "scripts" / "setup.sh")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    _shim(bin_dir, "id", "echo 1000")
    _shim(bin_dir, "dpkg-query", dpkg_query)
    _shim(bin_dir, "python", python_body)
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}",
           "PYTHON": python or f"{bin_dir}/python"}  # fmt: skip
    return subprocess.run(
        ["bash", str(tree / "scripts" / "setup.sh")],
        capture_output=True, text=True, env=env, timeout=60, cwd=tmp_path,
    )  # fmt: skip


@pytest.mark.compute
def test_without_root_or_python3_venv_it_stops_saying_so(tmp_path):
    # Debian's python3 without python3-venv: no ensurepip, so no venv can be made.
    out = _run_as_user_without_debs(tmp_path, "exit 1")
    assert out.returncode == 1, out
    assert "missing Debian packages:" in out.stderr and "python3-venv" in out.stderr
    assert "continuing" not in out.stderr, out.stderr
    assert "stopping:" in out.stderr and "without python3-venv" in out.stderr, out.stderr
    assert not (tmp_path / "tree" / ".venv").exists()


@pytest.mark.compute
def test_without_root_but_with_a_python_that_makes_venvs_it_continues(tmp_path):
    # A Python whose ensurepip imports: set-up goes on (and here fails later, at the
    # stand-in's venv, which is not what this test is about).
    out = _run_as_user_without_debs(tmp_path, 'case "$*" in *ensurepip*) exit 0;; esac; exit 1')
    assert "continuing; tests that need them will be skipped" in out.stderr, out.stderr
    assert "stopping:" not in out.stderr, out.stderr


@pytest.mark.compute
def test_python3_pip_is_not_asked_for(tmp_path):
    # The venv's pip comes from python3-venv (ensurepip); Debian's python3-pip was listed
    # as missing, and installed as root, for nothing.
    every_but_pip = 'case "$*" in *python3-pip*) exit 1;; esac; printf "install ok installed"'
    out = _run_as_user_without_debs(tmp_path, "exit 1", dpkg_query=every_but_pip)
    assert "missing Debian packages" not in out.stderr, out.stderr


@pytest.mark.compute
def test_the_long_pip_step_is_announced_and_named_when_it_fails(tmp_path):
    # A first set-up spent a minute or more in a quiet pip with no line saying so; and
    # behind a TLS-intercepting proxy whose CA the machine lacks, pip retried five times
    # and set-up ended on pip's "No matching distribution", with nothing saying which
    # step failed or what to check.
    venv_bin = tmp_path / "tree" / ".venv" / "bin"
    venv_bin.mkdir(parents=True)
    _shim(venv_bin, "python", 'case "$*" in *"pip --version"*) exit 0;; esac; exit 1')
    out = _run_as_user_without_debs(tmp_path, "exit 1", dpkg_query='printf "install ok installed"')
    assert "setup: installing the pinned packages of requirements-dev.lock" in out.stdout, out
    assert out.returncode == 1, out
    assert "setup: pip could not install requirements-dev.lock" in out.stderr, out.stderr


@pytest.mark.compute
def test_a_python_that_is_not_there_is_refused_before_anything(tmp_path):
    # PYTHON=/nowhere/python3 was found only at the venv step, after the Debian packages,
    # and said as "install python3-venv".
    nowhere = str(tmp_path / "nowhere" / "python3")
    out = _run_as_user_without_debs(tmp_path, "exit 1", python=nowhere)
    assert out.returncode == 2, out
    assert out.stderr.splitlines() == [
        f"setup: PYTHON='{nowhere}' is not a program on PATH; set PYTHON to a "
        "Python 3.11+ (default python3)"
    ]
    assert out.stdout == ""


@pytest.mark.compute
@pytest.mark.parametrize(
    ("args", "said"),
    [
        (["test", "TEST_WORKERS=x"], "TEST_WORKERS=x is not a number of test workers"),
        (["lock", "UPGRADE=0"], "UPGRADE=0: give UPGRADE=1 to upgrade the pins, or nothing"),
    ],
)
def test_make_refuses_a_bad_variable_before_any_step(args, said):
    # make test TEST_WORKERS=x ran set-up and the lint, failed the parallel half on
    # xdist's refusal and then ran the serial half (minutes) before failing; make lock
    # UPGRADE=0 upgraded every pin.
    if shutil.which("make") is None:
        pytest.skip("needs make")
    # as a make run from a shell: under make test itself, the make inside says which
    # folder it enters on stdout
    env = {k: v for k, v in os.environ.items() if k not in ("MAKEFLAGS", "MAKELEVEL", "MFLAGS")}
    out = subprocess.run(["make", "-n", *args], capture_output=True, text=True, timeout=60,
                         cwd=SETUP.parents[1], env=env)  # fmt: skip
    assert out.returncode == 2 and said in out.stderr, out
    assert out.stdout == "" and len(out.stderr.splitlines()) == 1, out  # no step, one line


def _run_where_python3_is_missing(
    tmp_path: Path, uid: int, *, apt: bool = True
) -> subprocess.CompletedProcess:
    """setup.sh with PYTHON unset on a PATH without python3 (a minimal Debian or Ubuntu:
    a container image, debootstrap), as ``uid``; apt-get is a stand-in that notes its
    arguments in ``apt.args`` and fails to install, so nothing is."""
    if shutil.which("bash") is None:
        pytest.skip("needs bash")
    tree = tmp_path / "tree"
    (tree / "scripts").mkdir(parents=True)
    shutil.copy(SETUP, tree / "scripts" / "setup.sh")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for tool in ("bash", "cat", "rm", "mktemp", "grep", "dirname"):
        found = shutil.which(tool)
        if found is None:
            pytest.skip(f"needs {tool}")
        (bin_dir / tool).symlink_to(found)
    _shim(bin_dir, "id", f"echo {uid}")
    _shim(bin_dir, "dpkg-query", "exit 1")
    _shim(bin_dir, "debconf-set-selections", "cat >/dev/null")
    if apt:
        _shim(bin_dir, "apt-get", f'echo "$*" >> {tmp_path}/apt.args; [ "$1" = update ]')
    env = {k: v for k, v in os.environ.items() if k != "PYTHON"}
    env["PATH"] = str(bin_dir)
    return subprocess.run(
        [str(bin_dir / "bash"), str(tree / "scripts" / "setup.sh")],
        capture_output=True, text=True, env=env, timeout=60, cwd=tmp_path,
    )  # fmt: skip


@pytest.mark.compute
def test_without_python3_root_installs_it_with_the_other_packages(tmp_path):
    # Ubuntu 24.04's and Debian 13's minimal systems (container images, debootstrap)
    # have no python3: as root, `make demo` stopped at once on "PYTHON='python3' is not
    # a program on PATH; set PYTHON to a Python 3.11+", though set-up was about to
    # install Debian packages anyway.
    out = _run_where_python3_is_missing(tmp_path, 0)
    assert "is not a program on PATH" not in out.stderr, out
    installed = (tmp_path / "apt.args").read_text().splitlines()
    assert any(line.startswith("install") and " python3 " in f"{line} " for line in installed), (
        installed
    )


@pytest.mark.compute
def test_without_python3_a_user_is_told_which_packages_to_install(tmp_path):
    out = _run_where_python3_is_missing(tmp_path, 1000)
    assert out.returncode == 2, out
    assert out.stderr.splitlines() == [
        "setup: python3 is not installed; on Debian or Ubuntu: sudo apt-get install "
        "python3 python3-venv (or run make setup as root)"
    ]
    assert not (tmp_path / "apt.args").exists()


@pytest.mark.compute
def test_without_python3_nor_apt_get_root_is_not_told_to_run_as_root(tmp_path):
    # (it was told "sudo apt-get install python3 python3-venv (or run make setup as
    # root)": root already, on a system with no apt-get)
    out = _run_where_python3_is_missing(tmp_path, 0, apt=False)
    assert out.returncode == 2, out
    assert out.stderr.splitlines() == [
        "setup: python3 is not installed, and this system has no apt-get to install it: "
        "install a Python 3.11+ with its venv module, or set PYTHON to one"
    ]
