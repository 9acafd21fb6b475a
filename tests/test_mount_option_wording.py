"""An input or output refused by a mount option says the option. On a ``nosymfollow``
mount, a path through one symlink got the kernel's "Too many levels of symbolic links"
(and the -o line no verb); a read-only -o folder was "not writable"."""

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

_PROBE = """
import sys
from pathlib import Path
sys.path.insert(0, sys.argv[1])
from shrink.errors import ShrinkError
from shrink.files import check_output, regular_file, read_text
m = Path(sys.argv[2])
for call in (
    lambda: regular_file(m / "link.log", kind="a log", reason="x"),
    lambda: read_text(m / "link.log"),
    lambda: check_output(m / "outlink" / "t.parquet", what="--out: output"),
    lambda: check_output(m / "ro" / "t.parquet", what="--out: output"),
    lambda: check_output(m / "ro", kind="dir", what="--runlogs"),
):
    try:
        call()
        print("passed")
    except ShrinkError as exc:
        print(exc)
"""


def test_paths_a_mount_option_refuses_name_it(tmp_path: Path) -> None:
    m = tmp_path / "m"
    m.mkdir()
    script = (
        f"mount -t tmpfs -o nosymfollow t {m} && echo x > {m}/real.log && "
        f"ln -s real.log {m}/link.log && mkdir {m}/out {m}/ro && ln -s out {m}/outlink && "
        f"mount -t tmpfs -o ro t2 {m}/ro && " + 'exec "$0" -c "$1" "$2" "$3"'
    )
    cmd = ["unshare", "-m", "--propagation", "private", "sh", "-c", script]
    done = subprocess.run(
        [*cmd, sys.executable, _PROBE, str(ROOT), str(m)],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    if "nosymfollow" in done.stderr and "mount" in done.stderr:
        pytest.skip("no nosymfollow on this kernel")
    assert done.returncode == 0, done.stderr
    link, text, out, ro_file, ro_dir = done.stdout.splitlines()
    said = (
        f"{m}/link.log is a symlink on a file system mounted nosymfollow, which follows no "
        f"symlink; give the path it leads to ({m}/real.log)"
    )
    assert link == f"{m}/link.log: cannot read ({said})"
    assert text == f"{m}/link.log: cannot read the file: {said}"
    assert out == (
        f"--out: output {m}/outlink/t.parquet: cannot be written there: {m}/outlink is a "
        "symlink on a file system mounted nosymfollow, which follows no symlink; give the "
        f"path it leads to ({m}/out/t.parquet)"
    )
    assert ro_file == (
        f"--out: output {m}/ro/t.parquet: cannot create it, {m}/ro is on a read-only file system"
    )
    assert ro_dir == f"--runlogs {m}/ro is on a read-only file system"
