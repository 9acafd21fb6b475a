"""An output folder is held as the folder it is, not by a name of it: the same folder
under a second name (a bind mount's mount point beside its source, the folder renamed
mid-run) was held by a lock file of its own, and a second run wrote it at once."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import shrink

_ROOT = str(Path(shrink.__file__).resolve().parents[1])

# A second run naming ``argv[1]`` as its output folder: prints "held" or the refusal.
_SECOND = (
    "import sys\nfrom shrink.errors import OutputBusyError\n"
    "from shrink.folder_locks import hold_output\n"
    "try:\n    hold_output(sys.argv[1], 'dir')\nexcept OutputBusyError as exc:\n"
    "    print('refused', exc)\nelse:\n    print('held')\n"
)


def _second_run(folder: Path, *before: str) -> str:
    env = {**os.environ, "PYTHONPATH": _ROOT}
    args = [*before, sys.executable, "-c", _SECOND, str(folder)]
    r = subprocess.run(args, env=env, capture_output=True, text=True, timeout=60, check=False)
    assert r.returncode == 0, r.stderr
    return r.stdout.strip()


@pytest.mark.compute
def test_a_folder_renamed_mid_run_is_refused_to_a_second_run(tmp_path):
    from shrink.folder_locks import hold_output, release_outputs

    out = tmp_path / "parts"
    hold_output(out, "dir")  # new: made here, held as itself
    try:
        assert out.is_dir()
        out.rename(tmp_path / "renamed")
        said = _second_run(tmp_path / "renamed")
    finally:
        release_outputs()
    assert said.startswith("refused"), said
    assert f"{tmp_path / 'renamed'}: another shrink run is writing this folder" in said
    assert _second_run(tmp_path / "renamed") == "held"  # let go with the first


@pytest.mark.compute
def test_a_new_output_folder_left_empty_is_removed_and_one_written_stays(tmp_path):
    from shrink.folder_locks import hold_output, release_outputs

    hold_output(tmp_path / "empty", "dir")
    hold_output(tmp_path / "written", "dir")
    (tmp_path / "written" / "x").write_text("x\n")
    (tmp_path / "kept").mkdir()
    hold_output(tmp_path / "kept", "dir")  # (there before: never removed)
    release_outputs()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["kept", "written"]


@pytest.mark.compute
def test_an_output_folder_claimed_by_its_own_run_is_not_refused(tmp_path):
    """``predict -o D`` holds D as its output, then claims it to write: its own lock."""
    from shrink.folder_locks import claimed, claimed_shared, hold_output, release_outputs

    out = tmp_path / "pred"
    hold_output(out, "dir")
    try:
        with claimed(out), claimed_shared(out, "x"):
            assert _second_run(out).startswith("refused")
        assert _second_run(out).startswith("refused")  # still held as its output
    finally:
        release_outputs()


@pytest.mark.root
@pytest.mark.skipif(os.geteuid() != 0 or shutil.which("unshare") is None, reason="mounts")
def test_a_bind_mounts_mount_point_beside_its_source_is_refused(tmp_path):
    from shrink.folder_locks import hold_output, release_outputs

    src, mnt = tmp_path / "src", tmp_path / "mnt"
    src.mkdir()
    mnt.mkdir()
    hold_output(src, "dir")
    try:  # (a mount namespace of its own: the bind mount goes with it)
        said = _second_run(
            mnt, "unshare", "-m", "sh", "-c", f'mount --bind "{src}" "{mnt}" && exec "$@"', "-"
        )
    finally:
        release_outputs()
    assert said.startswith(f"refused {mnt}: another shrink run"), said
