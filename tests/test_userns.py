"""Root in a user namespace (``unshare -U -r``) is refused in one true line where the
server user is not mapped there: ``testbed up`` said "error: .../srv: Invalid argument"
(chown to an unmapped UID)."""

from __future__ import annotations

import os
import pwd
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from shrink.errors import TestbedError
from shrink.testbed import private, userns


@pytest.mark.compute
def test_an_unmapped_server_user_is_said(monkeypatch):
    maps = {"uid": [(0, 1)], "gid": [(0, 1)]}
    monkeypatch.setattr(userns, "_ranges", lambda which: maps[which])
    assert userns.unmapped(0, 0) is None
    assert userns.unmapped(33, 0) == "UID 33 (this user namespace maps UIDs 0-0)"
    assert userns.unmapped(0, 33) == "GID 33 (this user namespace maps GIDs 0-0)"
    maps["uid"] = [(0, 0x10000)]
    assert userns.unmapped(33, 0) is None


@pytest.mark.compute
def test_up_as_root_of_a_user_namespace_names_the_unmapped_user(monkeypatch):
    monkeypatch.setattr(os, "geteuid", lambda: 0)
    monkeypatch.setattr(userns, "_ranges", lambda which: [(0, 1)])
    name = next((n for n in private.SERVER_USERS if _uid(n)), None)
    if name is None:
        pytest.skip("no server user on this machine")
    with pytest.raises(TestbedError) as err:
        private.server_user()
    assert str(err.value).startswith(f"the servers run as {name}, whose UID {_uid(name)} (this")
    assert "is not mapped: root in a user namespace (unshare -U)" in str(err.value)


def _uid(name: str) -> int | None:
    try:
        uid = pwd.getpwnam(name).pw_uid
    except KeyError:
        return None
    return uid or None


@pytest.mark.skipif(shutil.which("unshare") is None, reason="unshare")
def test_testbed_up_in_a_user_namespace_is_one_line(tmp_path):
    if subprocess.run(["unshare", "-U", "-r", "true"], capture_output=True).returncode:
        pytest.skip("no user namespaces here")
    if not any(_uid(n) for n in private.SERVER_USERS):
        pytest.skip("no server user on this machine")
    (tmp_path / "doc").mkdir()
    os.chmod(tmp_path, 0o755)
    env = {**os.environ, "SHRINK_RUN_DIR": str(tmp_path / "run")}
    r = subprocess.run(
        ["unshare", "-U", "-r", sys.executable, "-m", "shrink", "testbed", "up",
         "--docroot", str(tmp_path / "doc"), "--state", str(tmp_path / "s.json"),
         "--share", "all", "--port", "0"],
        capture_output=True, text=True, env=env, cwd=Path(__file__).parent.parent, timeout=60,
    )  # fmt: skip
    assert r.returncode == 1, r.stderr
    last = r.stderr.strip().splitlines()[-1]
    assert "is not mapped: root in a user namespace" in last, r.stderr
    assert not (tmp_path / "s.json").exists()
    assert not list((tmp_path / "run").glob("up-*"))


@pytest.mark.compute
def test_down_of_servers_root_may_not_signal_names_them(monkeypatch, tmp_path):
    """A testbed up started in one user namespace, down run in another (two `unshare -U
    -r` shells): "error: Operation not permitted", and the servers kept running."""
    from shrink.testbed import teardown

    def refused(pid, sig):
        raise PermissionError(1, "Operation not permitted")

    monkeypatch.setattr(os, "geteuid", lambda: 0)
    monkeypatch.setattr(teardown.process, "has_capability", lambda cap: True)
    monkeypatch.setattr(os, "kill", refused)
    with pytest.raises(TestbedError) as err:
        teardown._refuse_if_anothers(tmp_path / "s.json", [4321, 4322])
    assert str(err.value).startswith(
        f"{tmp_path}/s.json: its processes [4321, 4322] may not be signalled from here "
        "(Operation not permitted): root of a user namespace (unshare -U)"
    )
    assert str(err.value).endswith("nothing was stopped")


@pytest.mark.compute
def test_up_as_root_of_a_namespace_that_denies_setgroups_is_one_line(monkeypatch):
    """Every ID mapped (0-999) but setgroups denied, as unshare -U -r leaves it: each
    server's start failed in its child, "cannot start lighttpd: Exception occurred in
    preexec_fn."."""
    monkeypatch.setattr(os, "geteuid", lambda: 0)
    monkeypatch.setattr(userns, "_ranges", lambda which: [(0, 1000)])
    monkeypatch.setattr(private, "setgroups_denied", lambda: True, raising=False)
    name = next((n for n in private.SERVER_USERS if _uid(n)), None)
    if name is None:
        pytest.skip("no server user on this machine")
    with pytest.raises(TestbedError, match=r"this user namespace denies setgroups"):
        private.server_user()


_HINT = """
import sys
sys.path.insert(0, sys.argv[1])
from shrink.cli._replay_opts import generator_hint
from shrink.errors import ReplayError
from shrink.replay.scaleout import set_realtime
print(generator_hint("this run", 0))
try:
    set_realtime(10)
except ReplayError as exc:
    print(exc)
"""


@pytest.mark.skipif(shutil.which("unshare") is None, reason="unshare")
def test_the_generator_hint_in_a_user_namespace_does_not_say_as_root():
    """``replay`` as root of ``unshare -U -r`` (UID 0, no SCHED_FIFO on the machine) was
    told to "run it SCHED_FIFO (--realtime 10, as root)", which it is and cannot; and
    ``--realtime 10`` there was said refused "by something else than a capability"."""
    if subprocess.run(["unshare", "-U", "-r", "true"], capture_output=True).returncode:
        pytest.skip("no user namespaces here")
    r = subprocess.run(
        ["unshare", "-U", "-r", sys.executable, "-c", _HINT, str(Path(__file__).parents[1])],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    hint, refused = r.stdout.splitlines()
    assert "--realtime 10, as root" not in hint
    assert "run it as the machine's root for SCHED_FIFO (--realtime 10: root of this " in hint
    assert refused == (
        "realtime priority 10: this process is root of a user namespace (unshare -U), whose "
        "CAP_SYS_NICE does not reach the machine's scheduler; run shrink as the machine's "
        "root for it, or run without --realtime"
    )


@pytest.mark.compute
def test_the_generator_hint_of_root_without_cap_sys_nice(monkeypatch):
    from shrink.cli import _replay_opts
    from shrink.replay import scaleout

    monkeypatch.setattr(os, "geteuid", lambda: 0)
    monkeypatch.setattr(os, "getpriority", lambda which, who: 0)
    monkeypatch.setattr(scaleout, "may_realtime", lambda: False)
    monkeypatch.setattr(userns, "_ranges", lambda which: [(0, 2**32 - 1)])
    hint = _replay_opts.generator_hint("2 levels")
    assert "give it CAP_SYS_NICE for SCHED_FIFO (--realtime 10: this root runs " in hint
    monkeypatch.setattr(scaleout, "may_realtime", lambda: True)
    assert "(--realtime 10, as root)" in _replay_opts.generator_hint("2 levels")
