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


_PIN = """
import os, subprocess, sys
sys.path.insert(0, sys.argv[1])
from shrink.errors import TestbedError
from shrink.testbed.recipe import pin_evenly
cpus = sorted(os.sched_getaffinity(0))
kid = subprocess.Popen(["sleep", "30"], user=65534, group=65534)  # a server, its root dropped
os.sched_setaffinity(0, {cpus[-1]})  # the master pinned, its children inheriting
kin = subprocess.Popen(["sleep", "30"], user=65534, group=65534)
try:
    print(pin_evenly([kin.pid], (cpus[-1],)) == {kin.pid: [cpus[-1]]})
    print(pin_evenly([kid.pid], (cpus[-1],)))  # another CPU set: needs CAP_SYS_NICE
except TestbedError as exc:
    print(exc)
finally:
    kid.kill()
    kin.kill()
"""


def test_root_without_cap_sys_nice_pins_a_server_of_one_cpu_and_says_why_not_more():
    # `testbed up --share 1` under capsh --drop=cap_sys_nice: "error: Operation not
    # permitted", naming nothing; the servers run as www-data, and pinning another
    # user's process needs CAP_SYS_NICE
    capsh = shutil.which("capsh")
    if os.geteuid() != 0 or capsh is None or len(os.sched_getaffinity(0)) < 2:
        pytest.skip("needs root, capsh and two CPUs")
    cmd = [capsh, "--drop=cap_sys_nice", "--", "-c", 'exec "$0" -c "$1" "$2"',
           sys.executable, _PIN, str(ROOT)]  # fmt: skip
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    inherited, refused = done.stdout.splitlines()
    assert inherited == "True"
    assert refused.startswith("cannot pin server process PID ")
    assert "(running as nobody)" in refused and "CAP_SYS_NICE" in refused


@pytest.mark.compute
def test_a_server_process_already_on_its_cpu_is_not_pinned_again(monkeypatch):
    from shrink.testbed import recipe

    calls = []
    monkeypatch.setattr(recipe.os, "sched_getaffinity", lambda pid: {3})
    monkeypatch.setattr(recipe.os, "sched_setaffinity", lambda pid, c: calls.append((pid, c)))
    assert recipe.pin_evenly([7, 8], (3, 4)) == {7: [3], 8: [4]}
    assert calls == [(8, {4})]


_FIFO = """
import sys
sys.path.insert(0, sys.argv[1])
from shrink.errors import ReplayError
from shrink.replay.scaleout import set_realtime
try:
    set_realtime(10)
    print("allowed")
except ReplayError as exc:
    print(exc)
"""


def test_root_refused_sched_fifo_is_told_why_not_to_become_root(tmp_path):
    # sweep --realtime 10 under capsh --drop=cap_sys_nice, as root: "needs root"
    capsh = shutil.which("capsh")
    if os.geteuid() != 0 or capsh is None:
        pytest.skip("needs root and capsh")
    cmd = [capsh, "--drop=cap_sys_nice", "--", "-c", 'exec "$0" -c "$1" "$2"',
           sys.executable, _FIFO, str(ROOT)]  # fmt: skip
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == (
        "realtime priority 10: this process is root, but runs without the capability "
        "CAP_SYS_NICE (dropped, as in a container or under capsh --drop); run without "
        "--realtime"
    )


def test_root_in_a_cgroup_without_realtime_time_is_told_so(tmp_path):
    # root with CAP_SYS_NICE in a cgroup v1 cpu group whose cpu.rt_runtime_us is 0 (a
    # new group's default): refused SCHED_FIFO, and told it "needs root"
    from shrink.share import cgroup_layout

    cpu = cgroup_layout().cpu
    if os.geteuid() != 0 or cpu is None or not (cpu / "cpu.rt_runtime_us").exists():
        pytest.skip("needs root and cgroup v1's cpu.rt_runtime_us")
    group = cpu / f"shrink-test-rt-{os.getpid()}"
    group.mkdir()
    try:
        if (group / "cpu.rt_runtime_us").read_text().strip() != "0":
            pytest.skip("a new group is given realtime time here")
        cmd = ["sh", "-c", f'echo $$ > {group}/tasks && exec "$0" -c "$1" "$2"',
               sys.executable, _FIFO, str(ROOT)]  # fmt: skip
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=60, check=False)
    finally:
        group.rmdir()
    assert done.returncode == 0, done.stderr
    assert "the cpu cgroup it runs in gives realtime tasks no time" in done.stdout
    assert "needs root" not in done.stdout


_DOWN = """
import subprocess, sys
sys.path.insert(0, sys.argv[1])
from shrink.errors import TestbedError
from shrink.testbed import teardown
# a server, its root dropped; it ends when its input does (no signal it takes from here)
kid = subprocess.Popen(["cat"], stdin=subprocess.PIPE, user=65534, group=65534)
try:
    teardown._refuse_if_anothers("tb.json", [kid.pid])
    print("allowed")
except TestbedError as exc:
    print(exc)
finally:
    kid.stdin.close()
    kid.wait()
"""


def test_root_without_cap_kill_is_refused_down_before_anything_is_touched():
    # `testbed down` under capsh --drop=cap_kill: "error: Operation not permitted"
    capsh = shutil.which("capsh")
    if os.geteuid() != 0 or capsh is None:
        pytest.skip("needs root and capsh")
    cmd = [capsh, "--drop=cap_kill", "--", "-c", 'exec "$0" -c "$1" "$2"',
           sys.executable, _DOWN, str(ROOT)]  # fmt: skip
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    out = done.stdout.strip()
    assert out.startswith("tb.json: its processes [") and "run as nobody" in out
    assert "CAP_KILL" in out and out.endswith("nothing was stopped")
    with_it = subprocess.run([sys.executable, "-c", _DOWN, str(ROOT)], capture_output=True,
                             text=True, timeout=60, check=False)  # fmt: skip
    assert with_it.stdout.strip() == "allowed"


_RO = """
import sys
from pathlib import Path
sys.path.insert(0, sys.argv[1])
from shrink.enforce.cfs import CgroupLayout, cgroups_refused
print(cgroups_refused(CgroupLayout(1, Path(sys.argv[2]), None, None)))
"""


def test_root_with_every_capability_refused_by_a_read_only_cgroup_mount_is_told_so(tmp_path):
    # a container's /sys/fs/cgroup is often mounted read-only, root keeping
    # CAP_DAC_OVERRIDE (Docker's default): told it runs without that capability
    from shrink.processes import has_capability

    if os.geteuid() != 0 or not shutil.which("unshare") or not has_capability(1):
        pytest.skip("needs root with CAP_DAC_OVERRIDE and unshare")
    folder = tmp_path / "cpu"
    folder.mkdir()
    script = (
        'mount --bind "$2" "$2" && mount -o remount,bind,ro "$2" && exec "$0" -c "$1" "$3" "$2"'
    )
    cmd = ["unshare", "--mount", "--propagation", "private", "sh", "-c", script,
           sys.executable, _RO, str(folder), str(ROOT)]  # fmt: skip
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    assert "its file system is mounted read-only" in done.stdout
    assert "without the capability" not in done.stdout


@pytest.mark.compute
def test_root_with_cap_dac_override_is_not_told_it_runs_without_it(tmp_path, monkeypatch):
    from shrink import processes

    monkeypatch.setattr(os, "geteuid", lambda: 0)
    monkeypatch.setattr(processes, "has_capability", lambda bit: True)
    said = cgroups_refused(CgroupLayout(1, tmp_path, None, None))
    assert "this process is root" in said and "without the capability" not in said


@pytest.mark.compute
def test_root_with_cap_sys_nice_refused_for_another_reason_is_not_told_of_a_cgroup(monkeypatch):
    # a seccomp filter or a security module refusing SCHED_FIFO to root with
    # CAP_SYS_NICE was said to be a cgroup with cpu.rt_runtime_us 0, whatever it held
    from shrink import processes

    monkeypatch.setattr(os, "geteuid", lambda: 0)
    monkeypatch.setattr(processes, "has_capability", lambda bit: True)
    for rt in (None, 950000):
        said = processes.realtime_refused(10, rt)
        assert "rt_runtime_us" not in said and "without the capability" not in said
        assert "seccomp filter" in said
    assert "(cpu.rt_runtime_us 0)" in processes.realtime_refused(10, 0)


@pytest.mark.compute
def test_a_containers_own_cpu_group_mounted_as_its_folder_gives_its_rt_runtime(tmp_path):
    # Docker on cgroup v1 (no cgroup namespace) mounts the container's own group, root
    # /docker/ID, as /sys/fs/cgroup/cpu; /proc/self/cgroup names /docker/ID. Its file was
    # looked for at /docker/ID below the mount, not found, and SCHED_FIFO refused there
    # (rt_runtime_us 0, Docker's default) was said to be a seccomp filter's doing.
    from shrink.enforce.cfs import own_rt_runtime_us

    (tmp_path / "cpu.rt_runtime_us").write_text("0\n")
    layout = CgroupLayout(1, tmp_path, None, tmp_path)
    cgroup = "5:cpu,cpuacct:/docker/abc\n4:memory:/docker/abc\n"
    mounts = f"100 99 0:30 /docker/abc {tmp_path} ro,nosuid - cgroup cgroup rw,cpu,cpuacct\n"
    assert own_rt_runtime_us(layout, cgroup, mounts) == 0
    # (the host's view: the whole hierarchy mounted, the group below it)
    (tmp_path / "docker" / "abc").mkdir(parents=True)
    (tmp_path / "docker" / "abc" / "cpu.rt_runtime_us").write_text("950000\n")
    mounts = f"100 99 0:30 / {tmp_path} rw,nosuid - cgroup cgroup rw,cpu,cpuacct\n"
    assert own_rt_runtime_us(layout, cgroup, mounts) == 950000


@pytest.mark.compute
@pytest.mark.parametrize(
    ("root", "group", "want"),
    [
        ("/docker/a\\040b", "/docker/a b", 0),  # mountinfo escapes a blank; the file does not
        ("/docker/abc", "/other", None),  # a group outside the mount's: not below it
        ("/..", "/", None),  # mounted from outside this cgroup namespace: its folder unknown
        ("/", "/../other", None),  # a group outside this cgroup namespace
    ],
)
def test_a_group_the_cpu_mount_does_not_show_gives_no_rt_runtime(
    tmp_path: Path, root: str, group: str, want: int | None
) -> None:
    # The group's folder was taken below the mount whatever the paths said: a root with an
    # escape (\040) matched no group, and each read the file of another group ("other"
    # below the mount, the mount's top, a folder outside it), whose 950000 had SCHED_FIFO's
    # refusal said to be a seccomp filter's, not the group's rt_runtime_us 0.
    from shrink.enforce.cfs import own_rt_runtime_us

    mnt = tmp_path / "cpu"
    for folder in (mnt / "docker" / "a b", mnt / "other", tmp_path / "other"):
        folder.mkdir(parents=True)
        (folder / "cpu.rt_runtime_us").write_text("950000\n")
    (mnt / "cpu.rt_runtime_us").write_text("950000\n" if want is None else f"{want}\n")
    layout = CgroupLayout(1, mnt, None, mnt)
    mounts = f"100 99 0:30 {root} {mnt} ro,nosuid - cgroup cgroup rw,cpu,cpuacct\n"
    assert own_rt_runtime_us(layout, f"5:cpu,cpuacct:{group}\n", mounts) == want
