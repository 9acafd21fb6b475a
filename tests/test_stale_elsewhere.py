"""A testbed started under a ``SHRINK_RUN_DIR`` since deleted: its record went with that
folder, and ``testbed down --stale`` said "no stale testbed" while its servers ran on
in shrink's cgroups. It names those groups and their PIDs now, and stops none of them
on a guess (they may be another run's live testbed)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from shrink.testbed import registry

ROOT = Path(__file__).resolve().parents[1]


def _entry_naming(state_path: Path, group: Path) -> None:
    """The registry entry ``up`` writes for a testbed whose replica's cgroup is ``group``."""
    from dataclasses import replace

    from shrink.testbed.state import TestbedState
    from tests.helpers.testbed import lighttpd_replica

    cg = {"name": group.name, "version": 2, "dirs": {"cpu": str(group)}}
    rs = replace(lighttpd_replica(), cgroup=cg)
    registry.record(state_path, TestbedState([rs], {}, {"name": "1-replica"}, {}, "doc", {}, "t"),
                    owned=False)  # fmt: skip


@pytest.mark.compute
def test_groups_no_recorded_testbed_names_are_found_with_their_pids(tmp_path, monkeypatch):
    mount = tmp_path / "cgroup"
    for name, procs in (("mine", "11\n"), ("elsewhere", "42\n7\n"), ("empty", "")):
        (mount / "shrink" / name).mkdir(parents=True)
        (mount / "shrink" / name / "cgroup.procs").write_text(procs)
    (mount / "shrink" / "link").symlink_to(mount / "shrink" / "elsewhere")
    monkeypatch.setenv("SHRINK_RUN_DIR", str(tmp_path / "runs"))
    monkeypatch.setattr("shrink.enforce.cfs.cgroup_mounts", lambda *a: {mount})
    _entry_naming(tmp_path / "s.json", mount / "shrink" / "mine")
    assert len(registry.stale()) == 1  # read back as up's (its state file is gone)
    found = registry.unrecorded_groups()
    assert found == [(mount / "shrink" / "elsewhere", [7, 42])]
    shutil.rmtree(tmp_path / "runs")  # the record is gone: both groups are unnamed now
    assert [g.name for g, _ in registry.unrecorded_groups()] == ["elsewhere", "mine"]
    assert registry.unrecorded_groups({tmp_path / "no-such-mount"}) == []


@pytest.mark.live
@pytest.mark.root
def test_down_stale_names_a_testbed_whose_run_dir_was_deleted(tmp_path):
    from tests.helpers.testbed import as_root_with

    as_root_with("lighttpd-php-cgi", pytest.MonkeyPatch(), tmp_path / "unused")
    doc, runs, state = tmp_path / "doc", tmp_path / "runs", tmp_path / "s.json"
    doc.mkdir()
    (doc / "index.html").write_text("hi\n")
    for p in (tmp_path, doc):
        p.chmod(0o755)
    (doc / "index.html").chmod(0o644)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}

    def shrink(*args: str, **extra: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "shrink", *args], env={**env, **extra},
                              capture_output=True, text=True, timeout=120)  # fmt: skip

    up = shrink("testbed", "up", "--docroot", str(doc), "--state", str(state), "--share",
                "0.5", "--port", "0", SHRINK_RUN_DIR=str(runs))  # fmt: skip
    if up.returncode != 0:
        pytest.skip(f"no testbed with a CPU-time share here: {up.stderr.strip()[-300:]}")
    try:
        st = json.loads(state.read_text())
        groups = [
            d for r in st["replicas"] for d in (r.get("cgroup") or {}).get("dirs", {}).values()
        ]
        if not groups:
            pytest.skip("this share is held without a cgroup here")
        shutil.rmtree(runs)
        out = shrink("testbed", "down", "--stale", SHRINK_RUN_DIR=str(tmp_path / "other"))
        assert out.returncode == 0, out.stderr
        assert out.stdout.startswith(f"no stale testbed recorded in {tmp_path / 'other'}")
        pids = [p for r in st["replicas"] for p in r["pids"]]
        names = {Path(g).name for g in groups}
        # (another testbed running on this machine has its own note)
        notes = [x for x in out.stderr.splitlines() if x.startswith("note: ")
                 and any(f"/{n}" in x.split(" holds ")[0] for n in names)]  # fmt: skip
        # one line for the group, naming its folder in each controller (cgroup v1)
        assert len(notes) == len(names), notes
        for g in set(groups):
            line = next(x for x in notes if str(g) in x.split(" holds ")[0])
            assert any(str(p) in line for p in pids), line
        assert all(Path(f"/proc/{p}").exists() for p in pids)  # named, not stopped
    finally:
        shrink("testbed", "down", "--state", str(state))


@pytest.mark.compute
def test_empty_groups_a_killed_up_left_are_found_and_removed(tmp_path, monkeypatch):
    """A kill -9 of `testbed up` (or its process group) after it made a replica's group
    and before it recorded a server in it left the empty group under shrink/ for good:
    `down --stale` said "no stale testbed recorded" and removed nothing."""
    from shrink.testbed import teardown

    gone = int(Path("/proc/sys/kernel/pid_max").read_text()) + 1  # no such process, ever
    mount = tmp_path / "cgroup"
    groups = {
        f"k_1-{gone}-1795887291-r0": "",  # its maker is gone: left by a killed up
        f"k_2-{os.getpid()}-1795887291-r0": "",  # its maker runs: it may be filling
        f"k_3-{gone}-1795887291-r0": "42\n",  # holds a process: not ours to remove
        f"k_4-{gone}-1795887291-r0": "",  # a recorded testbed's: down stops it
        "k_5": "",  # not a name up gives
    }
    for name, procs in groups.items():
        (mount / "shrink" / name).mkdir(parents=True)
        (mount / "shrink" / name / "cgroup.procs").write_text(procs)
    monkeypatch.setenv("SHRINK_RUN_DIR", str(tmp_path / "runs"))
    monkeypatch.setattr("shrink.enforce.cfs.cgroup_mounts", lambda *a: {mount})
    _entry_naming(tmp_path / "s.json", mount / "shrink" / f"k_4-{gone}-1795887291-r0")
    found = registry.orphaned_groups()
    assert found == [mount / "shrink" / f"k_1-{gone}-1795887291-r0"]
    (found[0] / "cgroup.procs").unlink()  # a real group's files go with its rmdir
    assert teardown.remove_groups(found) == found
    assert not found[0].exists()
    assert registry.orphaned_groups() == []
    assert registry.orphaned_groups({tmp_path / "no-such-mount"}) == []


@pytest.fixture
def nobodys():
    """The PID of a process running as user nobody (UID 65534), as root."""
    if os.geteuid() != 0:
        pytest.skip("needs root to start a process as another user")
    proc = subprocess.Popen(["sleep", "60"], user=65534, group=65534)
    try:
        yield proc.pid
    finally:
        proc.kill()
        proc.wait()


@pytest.mark.root
def test_up_as_root_warns_of_another_users_testbed_on_its_cpus(tmp_path, monkeypatch, nobodys):
    """Each user records its testbeds in a private folder of its own (``/tmp/shrink-UID``):
    root's ``up`` on CPU 1 said nothing of the testbed user nobody ran there."""
    if os.geteuid() != 0:
        pytest.skip("needs root to make a folder of another user's")
    from dataclasses import replace

    from shrink import processes
    from shrink.testbed.lifecycle import others_on
    from shrink.testbed.state import TestbedState
    from tests.helpers.testbed import lighttpd_replica

    tmp = tmp_path / "tmp"
    theirs = tmp / "shrink-65534"
    tmp.mkdir()
    me = nobodys
    live = replace(lighttpd_replica(), cpus=[1], masters=[me], processes={"lighttpd": [me]},
                   starttimes={me: processes.proc_info(me).starttime}, pinned={})  # fmt: skip
    monkeypatch.setenv("SHRINK_RUN_DIR", str(theirs))
    registry.record(tmp_path / "their state.json",
                    TestbedState([live], {}, {"name": "1-replica"}, {}, "doc", {}, "t"),
                    owned=False)  # fmt: skip
    theirs.chmod(0o700)
    for p in (theirs, *theirs.iterdir()):
        os.chown(p, 65534, 65534)
    monkeypatch.setenv("SHRINK_RUN_DIR", str(tmp_path / "mine"))
    monkeypatch.setattr("shrink.testbed.registry.tempfile.gettempdir", lambda: str(tmp))
    warned = [w for w in others_on([1], tmp_path / "m.json") if "UID 65534" in w]
    assert len(warned) == 1, warned
    assert "CPU(s) [1] also run a testbed of" in warned[0]
    assert str(tmp_path / "their state.json") in warned[0]
    assert not [w for w in others_on([0], tmp_path / "m.json") if "UID 65534" in w]
    theirs.chmod(0o777)  # a folder others may write: what it holds is not read
    assert not [w for w in others_on([1], tmp_path / "m.json") if "UID 65534" in w]
    # An entry naming a process of another user's (root's own, start time and all) is not
    # a testbed of theirs: it was warned of as one.
    theirs.chmod(0o700)
    for entry in theirs.iterdir():
        doc = json.loads(entry.read_text())
        doc["state"]["replicas"][0]["masters"] = [os.getpid()]
        doc["state"]["replicas"][0]["processes"] = {"lighttpd": [os.getpid()]}
        doc["state"]["replicas"][0]["starttimes"] = {
            str(os.getpid()): processes.proc_info(os.getpid()).starttime
        }
        entry.write_text(json.dumps(doc))
    assert not [w for w in others_on([1], tmp_path / "m.json") if "UID 65534" in w]


@pytest.mark.root
def test_an_entry_swapped_for_a_symlink_after_its_check_is_not_read_through(
    tmp_path, monkeypatch, nobodys
):
    """root's ``up`` checked another user's entry by name (a regular file of theirs), then
    opened it by name: swapped for a symlink in between, root read the file it names (here
    root's own record of a testbed, which then warned as theirs). It is checked as opened."""
    if os.geteuid() != 0:
        pytest.skip("needs root to make a folder of another user's")
    from dataclasses import replace

    from shrink import processes
    from shrink.testbed.lifecycle import others_on
    from shrink.testbed.state import TestbedState
    from tests.helpers.testbed import lighttpd_replica

    tmp = tmp_path / "tmp"
    theirs, roots = tmp / "shrink-65534", tmp_path / "roots"
    tmp.mkdir()
    me = nobodys  # (root's testbeds serve as an unprivileged user)
    live = replace(lighttpd_replica(), cpus=[1], masters=[me], processes={"lighttpd": [me]},
                   starttimes={me: processes.proc_info(me).starttime}, pinned={})  # fmt: skip
    monkeypatch.setenv("SHRINK_RUN_DIR", str(roots))
    registry.record(tmp_path / "root's state.json",
                    TestbedState([live], {}, {"name": "1-replica"}, {}, "doc", {}, "t"),
                    owned=False)  # fmt: skip
    (root_entry,) = roots.glob("testbed-*.json")
    theirs.mkdir(mode=0o700)
    decoy = theirs / "decoy"
    decoy.write_text("{}")
    entry = theirs / root_entry.name
    entry.symlink_to(root_entry)
    for p in (theirs, decoy, entry):
        os.chown(p, 65534, 65534, follow_symlinks=False)
    real_lstat = os.lstat

    def lstat(path, *args, **kwargs):  # the entry as it was when checked: before the swap
        return real_lstat(decoy if str(path) == str(entry) else path, *args, **kwargs)

    monkeypatch.setattr(os, "lstat", lstat)
    monkeypatch.setenv("SHRINK_RUN_DIR", str(tmp_path / "mine"))
    monkeypatch.setattr("shrink.testbed.registry.tempfile.gettempdir", lambda: str(tmp))
    assert not [w for w in others_on([1], tmp_path / "m.json") if "UID 65534" in w]


@pytest.mark.root
def test_down_as_root_of_another_users_testbed_says_to_run_it_as_that_user(
    tmp_path, monkeypatch, nobodys
):
    """root's ``down`` of a testbed nobody started was refused as a file another user
    could have written, without saying that nobody's own ``down`` stops it."""
    if os.geteuid() != 0:
        pytest.skip("needs root to make a folder of another user's")
    from dataclasses import replace

    from shrink import processes
    from shrink.errors import TestbedError
    from shrink.testbed import teardown
    from shrink.testbed.state import TestbedState
    from tests.helpers.testbed import lighttpd_replica

    tmp, state_path = tmp_path / "tmp", tmp_path / "tb.json"
    theirs = tmp / "shrink-65534"
    tmp.mkdir()
    me = nobodys  # (a testbed of theirs runs as them)
    live = replace(lighttpd_replica(), cpus=[1], masters=[me], processes={"lighttpd": [me]},
                   starttimes={me: processes.proc_info(me).starttime}, pinned={})  # fmt: skip
    st = TestbedState([live], {}, {"name": "1-replica"}, {}, "doc", {}, "t")
    monkeypatch.setenv("SHRINK_RUN_DIR", str(theirs))
    registry.record(state_path, st, owned=False)
    st.write(state_path)
    theirs.chmod(0o700)
    for p in (theirs, *theirs.iterdir(), state_path):
        os.chown(p, 65534, 65534)
    monkeypatch.setenv("SHRINK_RUN_DIR", str(tmp_path / "mine"))
    monkeypatch.setattr("shrink.testbed.registry.tempfile.gettempdir", lambda: str(tmp))
    with pytest.raises(TestbedError, match=r"run `shrink testbed down` as nobody \(UID 65534\)"):
        teardown.down(state_path)
    assert processes.is_alive(me) and state_path.stat().st_uid == 65534
