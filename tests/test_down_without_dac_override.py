"""``testbed down`` as root without CAP_DAC_OVERRIDE (a container, ``capsh --drop``).

A replica's ``srv/`` is the server user's, mode 0700: such a root may not enter it.
``down`` said "r0: stopped 4 processes", exit 0, and left the whole run root (the
servers' configs, logs and sockets) under shrink's private folder without a word.
"""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

_REMOVE = """
import sys
from pathlib import Path
sys.path.insert(0, sys.argv[1])
from shrink.testbed.run_root import remove_run_root
base = Path(sys.argv[2])
print(remove_run_root(base / "up-tb-x" / "r0", base))
"""


@pytest.mark.parametrize("via_link", [False, True])
def test_a_run_root_whose_srv_folder_is_the_server_users_is_removed_without_dac_override(
    tmp_path: Path, via_link: bool
) -> None:
    """(``via_link``: the base named through a symlink, as SHRINK_RUN_DIR=/var/run/...
    names /run/...: the folders to take must be named from the run root as the walk
    names them, by its real path, or none is taken and the run root is left.)"""
    capsh = shutil.which("capsh")
    if os.geteuid() != 0 or capsh is None:
        pytest.skip("needs root and capsh")
    base = tmp_path / "run"
    srv = base / "up-tb-x" / "r0" / "srv"
    (srv / "tmp").mkdir(parents=True)
    (srv / "error.log").write_text("log\n")
    (srv / "tmp" / "sess").write_text("x")
    (base / "up-tb-x" / "r0" / "nginx.conf").write_text("conf\n")
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "keep").write_text("keep")
    (srv / "link").symlink_to(outside)  # planted by the server user: never followed
    for p in (srv / "tmp" / "sess", srv / "tmp", srv / "error.log", srv):
        os.chown(p, 65534, 65534)
        os.chmod(p, 0o700 if p.is_dir() else 0o600)
    os.chown(outside, 65534, 65534, follow_symlinks=False)
    drop = "--drop=cap_dac_override,cap_dac_read_search"
    shell = 'exec "$0" -c "$1" "$2" "$3"'
    given = base
    if via_link:
        given = tmp_path / "via"
        given.symlink_to(base)
    cmd = [capsh, drop, "--", "-c", shell, sys.executable, _REMOVE, str(ROOT), str(given)]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "True"
    assert not (base / "up-tb-x").exists()
    assert (outside / "keep").read_text() == "keep"
    assert os.stat(outside).st_uid == 65534  # the symlink's target was not made root's


def test_a_folder_on_the_way_swapped_for_a_symlink_is_not_followed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Between ``rmtree`` naming a folder it could not enter (``srv/a/b/c``) and the
    removal making it root's, the server user (who owns ``srv/a``) swaps ``srv/a/b`` for
    a symlink to a folder of its choosing: the chown and chmod, by the path's string,
    went through it and made another user's folder outside the run root root's, 0700."""
    if os.geteuid() != 0:
        pytest.skip("needs root (chown)")
    from shrink.testbed import run_root

    base = tmp_path / "run"
    root = base / "up-tb-x"
    (root / "r0" / "srv" / "a" / "b" / "c").mkdir(parents=True)
    outside = tmp_path / "victim"
    (outside / "c").mkdir(parents=True)
    os.chown(outside / "c", 65534, 65534)
    os.chmod(outside / "c", 0o755)
    real_remove = run_root._remove_below
    calls = []

    def racing_remove(path, note):
        calls.append(path)
        if len(calls) == 1:  # names a blocked folder, then the swap happens
            b = root / "r0" / "srv" / "a" / "b"
            note(os.open, str(b / "c"), None)
            shutil.rmtree(b)
            b.symlink_to(outside)
            return
        real_remove(path, note)

    monkeypatch.setattr(run_root, "_remove_below", racing_remove)
    run_root.remove_run_root(root / "r0", base)  # left, or removed: never followed
    st = os.stat(outside / "c")
    assert (st.st_uid, stat.S_IMODE(st.st_mode)) == (65534, 0o755)


def test_a_removal_that_cannot_take_a_folder_stops(tmp_path: Path) -> None:
    """The helper taking one folder refuses a path that leaves the run root."""
    from shrink.testbed.run_root import _take_folder

    (tmp_path / "root").mkdir()
    assert not _take_folder(tmp_path / "root", str(tmp_path / "elsewhere"))
    assert not _take_folder(tmp_path / "root", str(tmp_path / "root"))
