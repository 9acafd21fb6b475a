"""Root without CAP_DAC_OVERRIDE (a container, ``capsh --drop``) may not write the cpu
controller's folder (0555 root's on cgroup v1): a CPU-time share was refused with "need
root" and advice for running "without root", said to root."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from shrink.enforce.cfs import CgroupLayout, cgroups_refused

ROOT = Path(__file__).resolve().parents[1]

_UP = """
import sys
sys.path.insert(0, sys.argv[1])
from shrink.errors import TopologyError
from shrink.machine import Machine
from shrink.share import Share
from shrink.testbed.lifecycle import use_cgroups
import os
cpus = tuple(sorted(os.sched_getaffinity(0)))
m = Machine("m", sockets=1, cores_per_socket=len(cpus), cpus=(cpus,))
try:
    use_cgroups(Share.parse(f"{m.all_cpus[-1]}@50%", m), "auto", "cfs")
    print("allowed")
except TopologyError as exc:
    print(exc)
"""


@pytest.mark.compute
def test_root_who_may_not_write_the_cgroup_folder_is_told_why_not_to_become_root(tmp_path):
    folder = tmp_path / "cpu"
    folder.mkdir(mode=0o555)
    folder.chmod(0o555)
    said = cgroups_refused(CgroupLayout(1, folder, None, None))
    if os.geteuid() == 0:
        assert "this process is root" in said and "CAP_DAC_OVERRIDE" in said
        assert "(mode 0555)" in said and "Without root" not in said
    else:
        assert "need root or a delegated cgroup" in said and "Without root" in said


def test_root_with_cap_dac_override_dropped_is_refused_a_cpu_time_share_truly():
    capsh = shutil.which("capsh")
    if os.geteuid() != 0 or capsh is None:
        pytest.skip("needs root and capsh")
    from shrink.share import cgroup_layout

    cpu = cgroup_layout().cpu
    if cpu is None or os.stat(cpu).st_mode & 0o200:
        pytest.skip("no cpu controller whose folder only CAP_DAC_OVERRIDE lets root write")
    drop = "cap_dac_override,cap_dac_read_search"
    cmd = [capsh, f"--drop={drop}", "--", "-c", 'exec "$0" -c "$1" "$2"',
           sys.executable, _UP, str(ROOT)]  # fmt: skip
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    out = done.stdout
    assert out.startswith("no permission for cgroups: this process is root, but may not write")
    assert "CAP_DAC_OVERRIDE" in out and "Without root" not in out
