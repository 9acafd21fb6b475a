"""A server does not inherit the ``ulimit -f`` / ``ulimit -t`` its user put on shrink:
lighttpd started under ``ulimit -f 4`` died of SIGXFSZ once its error log reached 4 KiB,
in the middle of a sweep, and nothing said why. What cannot be lifted is named."""

from __future__ import annotations

import os
import resource
import subprocess
import sys
from pathlib import Path

from shrink import processes

ROOT = Path(__file__).resolve().parents[1]

# The child lowers its own soft limits, starts a "server" that writes 16 KiB and
# reports its limits, and prints how that went.
_CODE = """
import resource, sys
from pathlib import Path
from shrink.processes import start_process
for which in (resource.RLIMIT_FSIZE, resource.RLIMIT_CPU):
    resource.setrlimit(which, (4096 if which == resource.RLIMIT_FSIZE else 600,
                               resource.getrlimit(which)[1]))
out = Path(sys.argv[1])
p = start_process(
    ["sh", "-c", 'head -c 16384 /dev/zero > "$0"; echo "f=$(ulimit -f) t=$(ulimit -t)"',
     str(out / "big")],
    log_path=out / "log",
)
p.wait()
print(p.returncode, (out / "big").stat().st_size)
"""


def test_a_server_starts_without_the_file_size_and_cpu_limits(tmp_path):
    hard = [resource.getrlimit(w)[1] for w in (resource.RLIMIT_FSIZE, resource.RLIMIT_CPU)]
    done = subprocess.run(
        [sys.executable, "-c", _CODE, str(tmp_path)], capture_output=True, text=True,
        timeout=60, env={**os.environ, "PYTHONPATH": str(ROOT)},
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    if hard == [resource.RLIM_INFINITY] * 2:
        assert done.stdout.split() == ["0", "16384"]
        assert (tmp_path / "log").read_text().strip() == "f=unlimited t=unlimited"


def test_a_limit_that_cannot_be_lifted_is_named(monkeypatch):
    real = resource.getrlimit
    limits = {
        resource.RLIMIT_FSIZE: (4096, 4096),
        resource.RLIMIT_CPU: (600, 600),
        resource.RLIMIT_NPROC: (2, 2),  # ``ulimit -u 2``: php-cgi could not fork, up failed
    }
    monkeypatch.setattr(processes.resource, "getrlimit", lambda w: limits.get(w) or real(w))
    monkeypatch.setattr(processes, "_can_raise_hard_limits", lambda: False)
    notes = processes.limits_kept()
    assert len(notes) == 3
    assert "file-size limit of 4096 bytes (ulimit -f)" in notes[0]
    assert "CPU-time limit of 600 s (ulimit -t)" in notes[1]
    assert "limit of 2 processes for their user (ulimit -u)" in notes[2]
    limits[resource.RLIMIT_NPROC] = (96365, 96365)  # a system's usual limit: not named
    assert len(processes.limits_kept()) == 2
    monkeypatch.setattr(processes, "_can_raise_hard_limits", lambda: True)
    assert processes.limits_kept() == []


def test_a_limit_lifted_is_said(monkeypatch):
    # ``ulimit -u 500`` (against a page that forks) was gone for the servers, unsaid
    real = resource.getrlimit
    inf = resource.RLIM_INFINITY
    limits = {
        resource.RLIMIT_FSIZE: (inf, inf),
        resource.RLIMIT_CPU: (600, inf),
        resource.RLIMIT_NPROC: (500, 96365),
    }
    monkeypatch.setattr(processes.resource, "getrlimit", lambda w: limits.get(w) or real(w))
    monkeypatch.setattr(processes, "_can_raise_hard_limits", lambda: True)
    (note,) = processes.limits_lifted()
    assert "ulimit -t 600 (to unlimited), ulimit -u 500 (to unlimited)" in note
    monkeypatch.setattr(processes, "_can_raise_hard_limits", lambda: False)
    (note,) = processes.limits_lifted()
    assert "ulimit -t 600 (to unlimited), ulimit -u 500 (to 96365)" in note
    limits[resource.RLIMIT_NPROC] = (96365, 96365)  # a hard limit kept: nothing lifted
    limits[resource.RLIMIT_CPU] = (inf, inf)
    assert processes.limits_lifted() == []
