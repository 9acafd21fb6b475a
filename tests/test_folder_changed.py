"""An output folder that changes under a sweep (``umount -l``, or a folder moved aside
and another put in its place) stops it, naming the folder, and keeps the finished levels
in the folder now at that path: before, later files went into the folder underneath,
the earlier ones vanished with the mount, and the sweep ended with exit 0."""

from __future__ import annotations

import subprocess

import pytest

from shrink.loadcurve import LoadCurve
from tests.conftest import require_root
from tests.test_full_disk import _Target, sweep  # noqa: F401 (a fixture)


class _Swapped(_Target):
    """Its ``at``-th run first does ``swap()`` to its folder (the sweep's output one)."""

    def __init__(self, at: int, swap) -> None:
        super().__init__()
        self.at, self.swap = at, swap

    def run(self, trace, **kw):
        if self.runs + 1 == self.at:
            self.swap()
        return super().run(trace, **kw)


@pytest.mark.compute
def test_an_output_folder_replaced_mid_sweep_stops_it_and_keeps_the_levels(tmp_path, sweep):  # noqa: F811
    out = tmp_path / "out"

    def swap():  # the folder moved aside, a new one in its place
        out.rename(tmp_path / "aside")
        out.mkdir()

    r = sweep(_Swapped(2, swap))
    assert r.exit_code == 1, r.output
    assert str(out) in r.output and "no longer the folder this sweep started" in r.output
    assert not (out / "curve.json").exists()
    kept = LoadCurve.read_json(out / "curve.partial.json")
    assert [lv.level for lv in kept.levels] == [1, 2]  # every finished level, now here
    assert f"kept {out / 'curve.partial.json'}" in r.output


@pytest.mark.compute
def test_a_runlogs_folder_replaced_mid_sweep_is_named(tmp_path, sweep):  # noqa: F811
    logs = tmp_path / "logs"
    logs.mkdir()

    def swap():
        logs.rename(tmp_path / "logs-aside")
        logs.mkdir()

    r = sweep(_Swapped(2, swap), "--runlogs", str(logs))
    assert r.exit_code == 1, r.output
    assert f"{logs}: the --runlogs folder is no longer" in r.output
    assert [
        lv.level for lv in LoadCurve.read_json(tmp_path / "out" / "curve.partial.json").levels
    ] == [1, 2]


def test_an_output_folder_unmounted_lazily_mid_sweep_stops_it(tmp_path, sweep):  # noqa: F811
    require_root()
    out = tmp_path / "out"
    out.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=4m", "shrinktest", str(out)], check=True)
    try:
        r = sweep(_Swapped(2, lambda: subprocess.run(["umount", "-l", str(out)], check=True)))
    finally:
        subprocess.run(["umount", str(out)], capture_output=True, check=False)
    assert r.exit_code == 1, r.output
    assert "output folder is no longer" in r.output
    assert [lv.level for lv in LoadCurve.read_json(out / "curve.partial.json").levels] == [1, 2]
