"""The gate a server starts behind (start_process(recorded=...)): a program exec would not
run is refused before the fork, naming it, and the server gets exactly its environment."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from shrink import processes as process
from shrink.errors import TestbedError
from shrink.testbed.recipe import wait_until

NOBODY = (65534, 65534)


def _script(folder: Path, mode: int) -> Path:
    prog = folder / "server"
    prog.write_text("#!/bin/sh\nexec sleep 5\n")
    prog.chmod(mode)
    return prog


def _environ(pid: int) -> dict[str, str]:
    raw = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    return dict(item.decode().split("=", 1) for item in raw if item)


@pytest.mark.parametrize(
    "env",
    [
        {"A": "1", "PATH": "/usr/bin:/bin"},
        {"A": "1", "PATH": "/usr/bin:/bin", "PWD": "/nowhere", "SHLVL": "7", "_": "/x/y"},
        # dash reset IFS to space-tab-newline, PPID to its parent's and OPTIND to 1
        {"PATH": "/usr/bin:/bin", "IFS": "x", "PPID": "a b", "OPTIND": "12"},
        {"PATH": "/usr/bin:/bin", "PWD": "a\nb", "OLDPWD": "-e", "SHLVL": "", "_": ""},
    ],
)
def test_the_server_gets_exactly_its_environment(env):
    # The gate's shell (dash) exported PWD=<its folder> to every server, and its read
    # filled `_` with the gate's line when the environment had one.
    seen: list[int] = []
    proc = process.start_process(["sleep", "5"], env=env, recorded=lambda p: seen.append(p.pid))
    try:
        deadline = time.monotonic() + 5
        while process.exe_of(proc.pid) not in ("/usr/bin/sleep", "/bin/sleep"):
            assert time.monotonic() < deadline, "the gate did not exec the program"
            time.sleep(0.01)
        assert _environ(proc.pid) == env
    finally:
        proc.kill()
        proc.wait()


def test_an_optind_that_is_not_a_number_is_refused_before_the_fork():
    # dash died on it ("Illegal number") before the gate's line came: the server never
    # started, and only its log said why.
    before = process.own_children()
    with pytest.raises(OSError, match="OPTIND='x' in its environment is not a number"):
        process.start_process(
            ["sleep", "5"], env={"PATH": "/usr/bin:/bin", "OPTIND": "x"}, recorded=lambda p: None
        )
    assert process.own_children() == before


def test_a_program_without_an_x_bit_is_refused_before_the_fork(tmp_path):
    # It was a FileNotFoundError, "No such file or directory", for a file that is there.
    prog = _script(tmp_path, 0o644)
    before = process.own_children()
    with pytest.raises(PermissionError, match=f"{prog} is not executable by"):
        process.start_process([str(prog)], recorded=lambda p: None)
    assert process.own_children() == before


def test_a_program_the_server_user_may_not_execute_is_refused_before_the_fork(tmp_path):
    # Root may run it, the server's user not (a 0700 folder on its way): the gate forked,
    # the shell exited 126 and only the server's log said why.
    if os.geteuid() != 0:
        pytest.skip("needs root: the server runs as another user")
    folder = tmp_path / "private"
    folder.mkdir(mode=0o700)
    prog = _script(folder, 0o755)
    before = process.own_children()
    with pytest.raises(PermissionError, match=f"{prog} is not executable by uid 65534"):
        process.start_process([str(prog)], recorded=lambda p: None, user=NOBODY)
    assert process.own_children() == before
    with pytest.raises(FileNotFoundError, match="not found on PATH"):
        process.check_program("no-such-program-here", "/usr/bin:/bin", NOBODY)


def test_a_program_reached_through_a_folder_the_server_user_cannot_search_is_refused(tmp_path):
    # A symlink in a 0700 folder to a program anyone may run: only the folders above the
    # link's target were checked, so the gate forked and exited 126 into the server's log.
    if os.geteuid() != 0:
        pytest.skip("needs root: the server runs as another user")
    folder = tmp_path / "private"
    folder.mkdir(mode=0o700)
    (folder / "true").symlink_to("/usr/bin/true")
    (tmp_path / "link").symlink_to(folder)
    for prog in (folder / "true", tmp_path / "link" / "true"):
        with pytest.raises(PermissionError, match="is not executable by uid 65534"):
            process.check_program(str(prog), "/usr/bin:/bin", NOBODY)
    assert process.check_program("/usr/bin/true", "/usr/bin:/bin", NOBODY) == "/usr/bin/true"


def test_a_gate_that_could_not_exec_is_one_line_naming_the_program(tmp_path):
    # What the check cannot see (here a script whose #! interpreter is not there): the
    # gate's exit 127 was "server exited with status 127 during start-up".
    prog = tmp_path / "server"
    prog.write_text("#!/no/such/interpreter\n")
    prog.chmod(0o755)
    proc = process.start_process([str(prog)], recorded=lambda p: None)
    with pytest.raises(TestbedError, match=f"cannot start {prog}: not found .*\\(exit 127\\)"):
        wait_until(lambda: "no answer", [proc], 10.0)


class _RunsAsCaller:
    """A recipe whose servers run as the caller (a test double's); reaching its versions
    means ``up`` went on past its checks."""

    name = "as-caller"
    drops_root = False

    def versions(self):
        raise AssertionError("up went on with OPTIND=x in its environment")


def test_up_refuses_an_optind_that_is_not_a_number_before_it_starts_anything(
    tmp_path, machine, monkeypatch
):
    """Servers that run as this user get its environment, started behind a shell that
    dies on OPTIND=x: refused at the first server's start, after its run folder and
    configs were made; now before anything, in one line naming it."""
    from shrink.errors import ParameterError
    from shrink.share import Share
    from shrink.testbed import ServerSettings, up

    monkeypatch.setenv("OPTIND", "x")
    monkeypatch.setenv("SHRINK_RUN_DIR", str(tmp_path / "runs"))
    with pytest.raises(ParameterError, match="OPTIND='x' in its environment is not a number"):
        up(tmp_path, machine, Share.all_of(machine), state_path=tmp_path / "s.json",
           server=ServerSettings(_RunsAsCaller()))  # fmt: skip
    assert not (tmp_path / "runs").exists()
