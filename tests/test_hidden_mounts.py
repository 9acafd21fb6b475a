"""A mount hidden by a later one (on a folder above it, or on the same point) is no part
of what a path reaches: the docroot's mount checks took it as still there."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

from shrink.errors import ParameterError, TestbedError


def _mount(*args: str | Path) -> None:
    if subprocess.run(["mount", *map(str, args)], capture_output=True).returncode:
        pytest.skip("cannot mount here")


def _umount(*points: Path) -> None:
    for point in points:
        subprocess.run(["umount", str(point)], capture_output=True)


@pytest.mark.root
def test_a_state_reached_through_a_bind_over_a_hidden_mount_is_refused(tmp_path: Path) -> None:
    """``mount -t tmpfs x out/y; mount --bind doc out``: out/y/tb.json is doc/y/tb.json, but
    its place was taken from the tmpfs now hidden below the bind, and it was served."""
    from shrink.testbed.mounts import refuse_served

    doc, out = tmp_path / "doc", tmp_path / "out"
    (doc / "y").mkdir(parents=True)
    (out / "y").mkdir(parents=True)
    _mount("-t", "tmpfs", "hidden", out / "y")
    try:
        _mount("--bind", doc, out)
        with pytest.raises(ParameterError, match=r"inside the document root .* through a mount"):
            refuse_served(out / "y" / "tb.json", doc, "state", "its PIDs")
    finally:
        _umount(out, out / "y")


@pytest.mark.root
def test_a_kernel_mount_in_the_docroot_hidden_by_a_later_mount_is_not_refused(
    tmp_path: Path,
) -> None:
    """``mount -t proc proc www/p; mount -t tmpfs x www; mkdir www/p``: /proc is no longer
    reached from www, yet the docroot was refused as holding it at www/p."""
    from shrink.testbed.lifecycle import check_docroot

    www = tmp_path / "www"
    (www / "p").mkdir(parents=True)
    _mount("-t", "proc", "proc", www / "p")
    try:
        with pytest.raises(TestbedError, match=re.escape("p, inside it, is a system folder")):
            check_docroot(www)
        _mount("-t", "tmpfs", "over", www)
        www.chmod(0o755)
        (www / "p").mkdir()  # (a plain folder of the tmpfs, by the hidden mount's name)
        assert check_docroot(www) == www
    finally:
        _umount(www, www / "p")


def _mountinfo(tmp_path: Path, *rows: tuple[int, int, str, str]) -> str:
    lines = [f"{m} {p} 0:{m} / {point} rw - {fs} {fs} rw\n" for m, p, point, fs in rows]
    (tmp_path / "mountinfo").write_text("".join(lines))
    return str(tmp_path / "mountinfo")


@pytest.mark.compute
def test_a_mount_moved_on_top_of_a_later_one_is_the_one_reached(tmp_path: Path) -> None:
    """``mount -t proc proc /x; mount -t tmpfs t doc/p; mount --move /x doc/p``: a moved
    mount keeps its line in mountinfo, so the proc, on top, came before the tmpfs it
    covers; taken by the lines' order, the proc was dropped as hidden and the tmpfs kept."""
    from shrink.testbed.mounts import mount_table

    info = _mountinfo(
        tmp_path, (1, 0, "/", "ext4"), (5, 6, "/doc/p", "proc"), (6, 1, "/doc/p", "tmpfs")
    )
    assert [(m.point, m.fs) for m in mount_table(info)] == [
        (Path("/"), "ext4"),
        (Path("/doc/p"), "proc"),
    ]


@pytest.mark.compute
def test_hidden_mounts_are_told_by_their_parents(tmp_path: Path) -> None:
    """Three stacked on one point (the top one reached); one below a mount on a folder
    above (hidden, and what is mounted on it); a mount over a file (reached)."""
    from shrink.testbed.mounts import mount_table

    info = _mountinfo(
        tmp_path,
        (1, 0, "/", "ext4"),
        (2, 1, "/doc", "tmpfs"),
        (3, 2, "/doc", "tmpfs"),
        (4, 3, "/doc", "proc"),
        (7, 1, "/a/b/c", "proc"),  # hidden below /a, mounted after it...
        (8, 7, "/a/b/c/d", "sysfs"),  # ...and what is on it
        (9, 1, "/a", "tmpfs"),
        (10, 9, "/a/f", "ext4"),  # a file bound over a file
    )
    assert [(str(m.point), m.fs) for m in mount_table(info)] == [
        ("/", "ext4"),
        ("/doc", "proc"),
        ("/a", "tmpfs"),
        ("/a/f", "ext4"),
    ]
