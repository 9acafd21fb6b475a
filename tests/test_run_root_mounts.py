"""``testbed down`` and a run root it cannot remove: a file system mounted inside it, or
an immutable file there. ``remove_run_root``'s ``shutil.rmtree`` entered a mount in the
run root and emptied it before failing on its mount point, and ``down`` dropped the
"not removed" without a word."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

pytestmark = pytest.mark.skipif(
    os.geteuid() != 0 or shutil.which("unshare") is None, reason="mounts: root's, unshare -m"
)

_REMOVE = """
import sys
from pathlib import Path
sys.path.insert(0, sys.argv[1])
from shrink.testbed.run_root import remove_run_root, why_left
base = Path(sys.argv[2])
print(remove_run_root(base / "up-tb-x" / "r0", base))
print(why_left(base / "up-tb-x"))
"""


def _run_root(tmp_path: Path) -> tuple[Path, Path]:
    base = tmp_path / "run"
    r0 = base / "up-tb-x" / "r0"
    (r0 / "srv" / "m").mkdir(parents=True)
    (r0 / "nginx.conf").write_text("conf\n")
    (r0 / "srv" / "error.log").write_text("log\n")
    return base, r0


def _in_mount_ns(mount: str, base: Path) -> list[str]:
    """``mount`` then the removal, in a mount namespace of their own (nothing leaks)."""
    script = f'{mount} && exec "$0" -c "$1" "$2" "$3"'
    cmd = ["unshare", "-m", "--propagation", "private", "sh", "-c", script]
    cmd += [sys.executable, _REMOVE, str(ROOT), str(base)]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    return done.stdout.splitlines()


@pytest.mark.parametrize("kind", ["tmpfs", "bind"])
def test_a_file_system_mounted_in_the_run_root_is_not_entered_and_is_said(
    tmp_path: Path, kind: str
) -> None:
    base, r0 = _run_root(tmp_path)
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "keep").write_text("keep")
    os.chown(outside, 65534, 65534)  # another's: the removal may not take it
    m = r0 / "srv" / "m"
    if kind == "tmpfs":  # another device: st_dev tells
        mount = f"mount -t tmpfs t {m} && echo keep > {m}/keep"
    else:  # the same file system: only the mount table tells
        mount = f"mount --bind {outside} {m}"
    removed, why = _in_mount_ns(mount, base)
    assert removed == "False"
    assert why.startswith(f"{m} is a mount point (")
    assert "unmount it, then remove the folder" in why
    assert (outside / "keep").read_text() == "keep"  # the bind's files were not removed
    assert os.stat(outside).st_uid == 65534  # nor its folder made root's
    assert not (r0 / "nginx.conf").exists()  # the rest was
    assert not (r0 / "srv" / "error.log").exists()


def test_the_mount_of_a_tmpfs_is_kept_whole(tmp_path: Path) -> None:
    base, r0 = _run_root(tmp_path)
    m = r0 / "srv" / "m"
    script = (
        f'mount -t tmpfs t {m} && echo keep > {m}/keep && "$0" -c "$1" "$2" "$3" && cat {m}/keep'
    )
    cmd = ["unshare", "-m", "--propagation", "private", "sh", "-c", script]
    cmd += [sys.executable, _REMOVE, str(ROOT), str(base)]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[-1] == "keep"  # rmtree emptied it


def test_an_immutable_file_in_the_run_root_is_said(tmp_path: Path) -> None:
    if shutil.which("chattr") is None:
        pytest.skip("needs chattr")
    base, r0 = _run_root(tmp_path)
    locked = r0 / "srv" / "error.log"
    subprocess.run(["chattr", "+i", str(locked)], check=True)
    try:
        removed, why = _in_mount_ns("true", base)
    finally:
        subprocess.run(["chattr", "-i", str(locked)], check=True)
    assert removed == "False"
    assert why == f"{locked} is immutable (chattr +i)"


def test_down_says_a_run_root_it_could_not_remove(tmp_path: Path, monkeypatch) -> None:
    from typer.testing import CliRunner

    from shrink.cli.testbed_cmd import _left_elsewhere
    from shrink.testbed import registry, teardown

    base, r0 = _run_root(tmp_path)
    monkeypatch.setattr(registry, "run_dir", lambda: base)
    monkeypatch.setattr(
        teardown.TestbedState, "read", lambda _p: type("S", (), {"replicas": [_Rep(r0)]})()
    )
    monkeypatch.setattr(teardown, "why_left", lambda root: f"{root}/srv/m is a mount point")
    import typer

    app = typer.Typer()
    app.command()(lambda: _left_elsewhere(tmp_path / "tb.json"))
    out = CliRunner().invoke(app, []).output
    assert f"warning: left {r0.parent} (the servers' configs and logs): {r0.parent}/srv/m" in out


class _Rep:
    def __init__(self, run_dir: Path) -> None:
        self.run_dir = str(run_dir)


@pytest.mark.parametrize("name", ["m", "m x\\y"])
def test_a_bind_mount_is_not_entered_when_the_base_is_named_through_a_symlink(
    tmp_path: Path, name: str
) -> None:
    """The mount table names the bind's real path; the removal compared the path it
    walked (the base as given: /var/run/... for /run/..., a symlink) with it, saw no
    mount point there, and emptied the bind's folder (another's files, the same file
    system: st_dev the same)."""
    base, r0 = _run_root(tmp_path)
    via = tmp_path / "via"
    via.symlink_to(base)
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "keep").write_text("keep")
    m = r0 / "srv" / name
    m.mkdir(exist_ok=True)
    removed, why = _in_mount_ns(f"mount --bind {outside} '{m}'", via)
    assert removed == "False"
    assert why.startswith(f"{m} is a mount point ("), why
    assert (outside / "keep").read_text() == "keep"  # the bind's files were not removed
