"""Another user's ``up`` learns which CPUs root's testbeds run on (root's records are in
a folder of root's that others cannot list), and nothing more: root's ``up`` and ``down``
write a summary of CPUs, start times and the servers' PIDs for it."""

from __future__ import annotations

import json
import os
from dataclasses import replace

import pytest

from shrink import processes
from shrink.testbed import cpus_in_use, registry
from shrink.testbed.lifecycle import others_on
from shrink.testbed.state import TestbedState

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="root's summary: root writes it")


def _roots_testbed(tmp_path, monkeypatch, pid: int):
    """A testbed of root's on CPU 1 whose server is ``pid``, recorded in root's run folder
    (here under ``tmp_path``); the summary's path there."""
    from tests.helpers.testbed import lighttpd_replica

    run = tmp_path / "run" / "shrink"
    monkeypatch.setattr(cpus_in_use, "SUMMARY", run / "cpus-in-use.json")
    monkeypatch.setenv("SHRINK_RUN_DIR", str(run))
    info = processes.proc_info(pid)
    live = replace(lighttpd_replica(), cpus=[1], masters=[pid], processes={"lighttpd": [pid]},
                   starttimes={pid: info.starttime if info else 1}, pinned={})  # fmt: skip
    state = tmp_path / "secret state.json"
    state.write_text("{}\n")  # (there: the testbed runs)
    registry.record(state, TestbedState([live], {}, {"name": "1-replica"}, {}, "doc", {}, "t0"),
                    owned=False)  # fmt: skip
    return state, run / "cpus-in-use.json"


def _as_another_user(tmp_path, monkeypatch) -> list[str]:
    monkeypatch.setattr(cpus_in_use, "_as_root", lambda: False)
    monkeypatch.setenv("SHRINK_RUN_DIR", str(tmp_path / "theirs"))
    try:
        return [w for w in others_on([0, 1], tmp_path / "m.json") if "of root" in w]
    finally:
        monkeypatch.setattr(cpus_in_use, "_as_root", lambda: True)
        monkeypatch.setenv("SHRINK_RUN_DIR", str(tmp_path / "run" / "shrink"))


def test_another_users_up_is_warned_of_roots_testbed_on_its_cpus(tmp_path, monkeypatch):
    state, summary = _roots_testbed(tmp_path, monkeypatch, os.getpid())
    assert summary.stat().st_mode & 0o777 == 0o644
    text = summary.read_text()
    assert str(tmp_path) not in text and "doc" not in text  # no path: CPUs, times, PIDs
    assert json.loads(text)["testbeds"][0]["cpus"] == [1]
    warned = _as_another_user(tmp_path, monkeypatch)
    assert warned == [
        "warning: CPU(s) [1] also run a testbed of root (started t0); the two disturb each "
        "other's measurements"
    ]
    registry.forget(state)  # root's down: the summary says so
    assert json.loads(summary.read_text()) == {"testbeds": []}
    assert _as_another_user(tmp_path, monkeypatch) == []


def test_a_summary_not_to_be_trusted_or_of_servers_gone_warns_of_nothing(tmp_path, monkeypatch):
    _, summary = _roots_testbed(tmp_path, monkeypatch, os.getpid())
    summary.chmod(0o666)  # anyone could have written it
    assert _as_another_user(tmp_path, monkeypatch) == []
    summary.chmod(0o644)
    os.chown(summary, 65534, 65534)  # not root's
    assert _as_another_user(tmp_path, monkeypatch) == []
    os.chown(summary, 0, 0)
    assert len(_as_another_user(tmp_path, monkeypatch)) == 1
    doc = json.loads(summary.read_text())
    doc["testbeds"][0]["processes"][0][1] += 1  # its server gone, its PID another's
    summary.write_text(json.dumps(doc))
    assert _as_another_user(tmp_path, monkeypatch) == []
    summary.write_text('{"testbeds": [{"cpus": "1", "started": 5, "processes": 7}]}')
    assert _as_another_user(tmp_path, monkeypatch) == []  # damaged: skipped, no traceback


def test_a_testbed_of_another_pid_namespace_is_warned_of(tmp_path, monkeypatch):
    # root's up ran in `unshare --pid` (or a container sharing /run): its PIDs name other
    # processes here, so they cannot say whether it runs; it is counted, not dropped
    _, summary = _roots_testbed(tmp_path, monkeypatch, os.getpid())
    doc = json.loads(summary.read_text())
    assert doc["testbeds"][0].get("pid_ns") is None  # recorded without one: as before
    doc["testbeds"][0]["processes"][0][1] += 1  # its PID, read here, is another's
    doc["testbeds"][0]["pid_ns"] = processes.pid_namespace() + 1
    summary.write_text(json.dumps(doc))
    assert len(_as_another_user(tmp_path, monkeypatch)) == 1


def test_root_reads_its_records_not_the_summary(tmp_path, monkeypatch):
    _roots_testbed(tmp_path, monkeypatch, os.getpid())
    assert cpus_in_use.roots_testbeds() == []


def test_a_run_folder_of_its_own_leaves_the_usual_summary_as_it_is(tmp_path, monkeypatch):
    """With ``SHRINK_RUN_DIR`` set, root's ``up`` writes no summary (decided: the summary
    lists the usual run folder's testbeds; written from another run folder it would
    replace that list, and /run/shrink's testbeds would go unwarned of)."""
    from tests.helpers.testbed import lighttpd_replica

    usual = tmp_path / "run" / "shrink"
    usual.mkdir(parents=True)
    summary = usual / "cpus-in-use.json"
    before = '{"testbeds": [{"cpus": [0], "started": "t0", "processes": [[1, null]]}]}\n'
    summary.write_text(before)
    monkeypatch.setattr(cpus_in_use, "SUMMARY", summary)
    monkeypatch.setenv("SHRINK_RUN_DIR", str(tmp_path / "own"))
    pid = os.getpid()
    live = replace(lighttpd_replica(), cpus=[1], masters=[pid], processes={"lighttpd": [pid]},
                   starttimes={pid: processes.proc_info(pid).starttime}, pinned={})  # fmt: skip
    state = tmp_path / "tb.json"
    state.write_text("{}\n")  # (there: the testbed runs)
    registry.record(state, TestbedState([live], {}, {"name": "1-replica"}, {}, "doc", {}, "t1"),
                    owned=False)  # fmt: skip
    assert [s for s, _ in registry.running()] == [state.resolve()]  # (recorded there)
    assert summary.read_text() == before
    registry.forget(state)
    assert summary.read_text() == before
    assert not (tmp_path / "own" / "cpus-in-use.json").exists()


def test_a_stopped_command_does_not_say_it_kept_the_summary(tmp_path, monkeypatch):
    """``testbed up --state`` on a full disk: "error: .../tb2.json: cannot write (ENOSPC);
    kept /run/shrink/cpus-in-use.json", a file of shrink's own the user never asked for,
    named as if it held something measured (and so for any stopped command that brought
    a testbed up or down)."""
    from shrink.atomic import recording
    from shrink.cli._kept import kept_words

    with recording() as written:
        state, summary = _roots_testbed(tmp_path, monkeypatch, os.getpid())
        registry.forget(state)
    assert summary in written
    assert str(summary) not in kept_words((), written)


def test_a_testbed_whose_pid_namespace_ended_is_not_published_as_of_another(tmp_path, monkeypatch):
    # the summary kept the ended namespace's number, and every reader counted the
    # testbed (its PIDs "cannot be looked at") until root brought it down
    if processes.pid_namespace() != processes._TOP_PID_NS:
        pytest.skip("root judges a namespace gone from the top one only")
    _, summary = _roots_testbed(tmp_path, monkeypatch, os.getpid())
    ((path, st),) = registry.running()
    me = os.getpid()
    dead = replace(st.replicas[0], starttimes={me: processes.proc_info(me).starttime + 1})
    registry.record(path, replace(st, replicas=[dead], pid_ns=2**40), owned=False)  # (none's)
    assert "pid_ns" not in json.loads(summary.read_text())["testbeds"][0]
    assert _as_another_user(tmp_path, monkeypatch) == []
