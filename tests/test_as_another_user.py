"""shrink run by a user other than the one who started a testbed: it says whose it is and
touches nothing, rather than stopping part of it and failing on an error naming nothing."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from helpers.testbed import sleeper

from shrink import processes as process
from shrink.errors import TestbedError
from shrink.testbed import lifecycle, registry
from shrink.testbed.state import ReplicaState, TestbedState

NOT_ROOT = 4242  # a UID no account has: this test's user, as far as shrink can tell


def _state(path: Path, pid: int, start: int) -> Path:
    rs = ReplicaState(
        name="r0", address="127.0.0.1", port=80, cpus=[0], masters=[pid],
        processes={"server": [pid]}, starttimes={pid: start}, pinned={}, config="c",
        errorlog="e", run_dir="", exes={pid: process.exe_of(pid)},
    )  # fmt: skip
    st = TestbedState([rs], {}, {"name": "1-replica"}, {}, "d", {}, "t")
    path.write_text(json.dumps(st.to_dict()))
    return path


@pytest.mark.root
def test_down_by_a_user_who_did_not_start_the_testbed_says_whose_it_is(tmp_path, monkeypatch):
    """``testbed down`` as a user without root on root's testbed: "error: Operation not
    permitted" (an EPERM from the first kill), naming neither the file nor the owner."""
    if os.geteuid() != 0:
        pytest.skip("needs root: the testbed is root's, the user is pretended")
    proc, start = sleeper()
    real_kill = os.kill

    def kill(pid: int, sig: int) -> None:
        if pid == proc.pid:  # root's process, as a user without root meets it
            raise PermissionError(1, "Operation not permitted")
        real_kill(pid, sig)

    monkeypatch.setattr(os, "geteuid", lambda: NOT_ROOT)
    monkeypatch.setattr(os, "kill", kill)
    monkeypatch.setattr(registry, "recorded", lambda _p: None)  # no run folder of UID 4242
    try:
        roots = _state(tmp_path / "root.json", proc.pid, start)  # written by root
        with pytest.raises(TestbedError) as err:
            lifecycle.down(roots)
        msg = str(err.value)
        assert msg.startswith(f"{roots}: it was started by root (UID 0), not by you")
        assert "nothing was stopped" in msg and "\n" not in msg
        # A copy of root's state is this user's own file: its processes still are not.
        mine = _state(tmp_path / "copy.json", proc.pid, start)
        os.chown(mine, NOT_ROOT, -1)
        with pytest.raises(TestbedError) as err:
            lifecycle.down(mine)
        assert f"its processes [{proc.pid}] run as root (UID 0), not as you" in str(err.value)
        assert proc.poll() is None
    finally:
        monkeypatch.undo()
        proc.kill()
        proc.wait()
