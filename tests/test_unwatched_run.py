"""A run whose testbed watch could make no look at all (EMFILE under a low ``ulimit -n``:
the generator's connections took every descriptor) went on unwatched, and nothing said
so: each look found nothing, and a server stopped meanwhile was not seen. It is now said
once a command."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

import shrink

_ROOT = str(Path(shrink.__file__).resolve().parents[1])

# A watch on this process (a testbed of one "server", itself) under RLIMIT_NOFILE 64,
# every descriptor taken while it looks; then freed, the run's end says it twice.
_RUN = """
import os, resource, time
from shrink.procfs import proc_info
from shrink.testbed import watch
from shrink.testbed.problems import testbed_problem

me = os.getpid()
state = {"replicas": [{"name": "r0", "address": "127.0.0.1", "port": 9,
          "cpus": sorted(os.sched_getaffinity(me)), "masters": [me],
          "processes": {"lighttpd": [me]}, "starttimes": {str(me): proc_info(me).starttime},
          "pinned": {}, "config": "", "errorlog": ""}]}
assert testbed_problem(state) is None
resource.setrlimit(resource.RLIMIT_NOFILE, (64, resource.getrlimit(resource.RLIMIT_NOFILE)[1]))
w = watch.Watch(lambda: testbed_problem(state))
held = []
try:
    while True:
        held.append(os.open("/dev/null", os.O_RDONLY))
except OSError:
    pass
w.start()
time.sleep(6 * watch.POLL_S)
w.stop.set()
w.join(5)
for fd in held:
    os.close(fd)
assert w.finish() is None
print("looks", w.looks, "failed", w.failures)
watch.say_unwatched(w)
watch.say_unwatched(w)
"""


def test_a_run_whose_every_look_failed_is_said_unwatched_once():
    env = {**os.environ, "PYTHONPATH": _ROOT}
    r = subprocess.run([sys.executable, "-c", _RUN], env=env, capture_output=True, text=True,
                       timeout=60, check=False)  # fmt: skip
    assert r.returncode == 0, r.stderr
    looks = int(r.stdout.split()[1])
    assert looks >= 2 and r.stdout.split()[3] == str(looks)
    assert r.stderr == (
        f"warning: the testbed was not watched during a run: none of its {looks} looks at "
        "the servers could be made (Too many open files (ulimit -n 64)); a server stopped, "
        "frozen or re-shared meanwhile and put back before the run's end would not have "
        "been seen (said once)\n"
    )


@pytest.mark.compute
def test_a_run_with_one_look_made_is_not_said_unwatched(capsys):
    import errno

    from shrink.testbed import watch

    w = watch.Watch(lambda: None)
    w.looks, w.failures = 3, 2
    w.failed = OSError(errno.EMFILE, "Too many open files")
    assert w.unwatched is None
    watch.say_unwatched(w)
    assert capsys.readouterr().err == ""


@pytest.mark.compute
def test_the_unwatched_line_is_true_of_enfile_one_look_and_a_server_stopped_for_good():
    # ENFILE is the system's open-file table, not "ulimit -n"; one look was "none of its 1
    # looks"; and a server stopped for good is seen at the run's end (the servers are looked
    # at after it): only one stopped, frozen or re-shared and put back goes unseen.
    import errno

    from shrink.report.text import unwatched_text

    said = unwatched_text(1, OSError(errno.ENFILE, "Too many open files in system"))
    assert said == (
        "warning: the testbed was not watched during a run: its one look at the servers "
        "could not be made (Too many open files in system (the system's open files, sysctl "
        "fs.file-max)); a server stopped, frozen or re-shared meanwhile and put back before "
        "the run's end would not have been seen (said once)"
    )
