"""A mount made under a running testbed's document root after ``up``: ``up`` refuses a
document root holding a bind mount of /etc, but ``mount --bind /etc doc/x`` made while
the testbed ran was served (and measured against) without a word. A run against the
testbed (sweep, replay, predict's levels) now stops with a testbed error naming the
mount, before and after each run, and ``testbed status`` names it as a problem."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import shrink
import shrink.testbed.status  # (read from sys.modules below)
from shrink.errors import TestbedError, printable
from shrink.procfs import proc_info
from shrink.replay.live import LiveTarget
from shrink.testbed.state import ReplicaState

pytestmark = pytest.mark.root


def _state(pid: int, docroot) -> dict:
    return {
        "docroot": str(docroot),
        "replicas": [
            {"name": "r0", "address": "127.0.0.1", "port": 9,
             "cpus": sorted(os.sched_getaffinity(pid)), "masters": [pid],
             "processes": {"lighttpd": [pid]},
             "starttimes": {str(pid): proc_info(pid).starttime},
             "pinned": {}, "config": "", "errorlog": ""}
        ],
    }  # fmt: skip


class _Read:
    """A testbed state read back: running, on ``docroot``."""

    def __init__(self, replicas: list[ReplicaState], docroot) -> None:
        self.replicas, self.stopped, self.notes, self.server = replicas, None, [], {}
        self.docroot = str(docroot)

    def elsewhere(self) -> None:
        return None  # brought up in this PID namespace


def test_a_system_folder_mounted_under_the_docroot_after_up_stops_the_run(tmp_path, monkeypatch):
    if os.geteuid() != 0:
        pytest.skip("needs root to bind-mount")
    doc = tmp_path / "doc"
    (doc / "x").mkdir(parents=True)
    srv = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    status_mod = sys.modules["shrink.testbed.status"]
    try:
        state = _state(srv.pid, doc)
        target = LiveTarget([("127.0.0.1", 9)], state=state)
        target._check_server()  # (nothing mounted: the run goes on)
        r = ReplicaState.from_dict(state["replicas"][0])
        monkeypatch.setattr(status_mod.TestbedState, "read", lambda p: _Read([r], doc))
        monkeypatch.setattr(status_mod, "recipe_of", lambda st: None)
        (rep,) = status_mod.status("x.json", check_health=False)
        assert rep.problem is None
        if subprocess.run(["mount", "--bind", "/etc", str(doc / "x")]).returncode:
            pytest.skip("cannot bind-mount here")
        try:
            with pytest.raises(TestbedError) as err:
                target._check_server()
            assert str(err.value) == (
                f"the server under test went wrong: document root {doc}: {doc / 'x'}, inside "
                "it, is a system folder (a mount of /etc), mounted since `testbed up`, whose "
                "files the servers serve to any client: unmount it, or bring the testbed down"
            )
            (rep,) = status_mod.status("x.json", check_health=False)
            assert not rep.ok and f"{doc / 'x'}, inside it, is a system folder" in rep.problem
        finally:
            subprocess.run(["umount", str(doc / "x")], check=True)
        target._check_server()  # (unmounted: fine again)
    finally:
        srv.kill()
        srv.wait()


# In a mount namespace of its own (nothing mounted where other processes see it): a tmpfs
# and a bind of /etc under document root argv[1], what whole_fs_mount says after each.
_MOUNTS = (
    "import json, subprocess, sys\nfrom pathlib import Path\n"
    "from shrink.testbed.mounts import whole_fs_mount\n"
    "doc = Path(sys.argv[1])\n"
    "subprocess.run(['mount', '-t', 'tmpfs', 'tmpfs', str(doc / 't')], check=True)\n"
    "print(json.dumps(whole_fs_mount(doc)))\n"
    "subprocess.run(['mount', '--bind', '/etc', str(doc / 'x')], check=True)\n"
    "print(json.dumps(whole_fs_mount(doc)))\n"
)


@pytest.mark.parametrize("name", ["doc root", "doc\nroot", "doc\x1b[2Jroot"])
def test_a_mount_under_a_docroot_named_oddly_is_seen_and_said_on_one_line(tmp_path, name):
    # mountinfo escapes a blank or newline of a mount point (\040, \012): the mount is seen
    # all the same; an ordinary tmpfs there is no system folder. The docroot's name was put
    # in the line as it was: `testbed status` printed a docroot with a newline on two lines.
    if os.geteuid() != 0 or not shutil.which("unshare"):
        pytest.skip("needs root and unshare to mount in a namespace of its own")
    doc = tmp_path / name
    (doc / "t").mkdir(parents=True)
    (doc / "x").mkdir()
    env = {**os.environ, "PYTHONPATH": str(Path(shrink.__file__).resolve().parents[1])}
    cmd = ["unshare", "-m", "--propagation", "private", sys.executable, "-c", _MOUNTS, str(doc)]
    r = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=60)
    if r.returncode:
        pytest.skip(f"cannot mount in a namespace here: {r.stderr.strip()}")
    tmpfs, etc = (json.loads(line) for line in r.stdout.splitlines())
    assert tmpfs is None
    shown = printable(doc)
    assert etc == (
        f"document root {shown}: {shown}/x, inside it, is a system folder (a mount of /etc)"
    )
    assert "\n" not in etc and "\x1b" not in etc


_LOOK = """
import json, subprocess, sys
sys.path.insert(0, sys.argv[1])
from shrink.testbed.problems import _replicas, docroot_mount_problem
doc, state = sys.argv[2], _replicas(json.loads(sys.argv[3]))
subprocess.run(["mount", "--bind", "/etc", doc + "/x"], check=True)
print(json.dumps([docroot_mount_problem(doc, state), docroot_mount_problem(doc)]))
"""


def test_a_mount_made_only_in_shrinks_own_mount_namespace_is_not_said_served(tmp_path):
    # shrink in `unshare --mount`, the servers outside it: a mount under the docroot made
    # only there was said to be served ("whose files the servers serve"); they answered 404
    if os.geteuid() != 0 or not shutil.which("unshare"):
        pytest.skip("needs root and unshare")
    doc = tmp_path / "doc"
    (doc / "x").mkdir(parents=True)
    server = subprocess.Popen(["sleep", "30"])  # the servers' mount namespace: this one
    try:
        root = str(Path(shrink.__file__).resolve().parents[1])
        state = json.dumps(_state(server.pid, doc))
        cmd = ["unshare", "--mount", "--propagation", "private", sys.executable, "-c", _LOOK,
               root, str(doc), state]  # fmt: skip
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=60, check=False)
    finally:
        server.kill()
        server.wait()
    assert done.returncode == 0, done.stderr
    servers_view, own_view = json.loads(done.stdout)
    assert servers_view is None  # not there for the servers
    assert own_view is not None and "a mount of /etc" in own_view  # (no server to ask)


def test_a_server_that_ends_while_its_mounts_are_looked_at_is_no_traceback(tmp_path, monkeypatch):
    # the server found alive, then ended (killed, crashed) before its /proc/PID/root was
    # looked through: FileNotFoundError out of `testbed status` and a run's checks
    from shrink.testbed import mounts

    doc = tmp_path / "doc"
    doc.mkdir()
    server = subprocess.Popen(["sleep", "30"])
    real = os.access

    def access_then_end(path, mode, *a, **kw):
        seen = real(path, mode, *a, **kw)
        if str(path).startswith(f"/proc/{server.pid}/") and server.poll() is None:
            server.kill()
            server.wait()
        return seen

    monkeypatch.setattr(os, "access", access_then_end)
    try:
        assert mounts.whole_fs_mount(doc, server.pid) is None
    finally:
        server.kill()
        server.wait()
