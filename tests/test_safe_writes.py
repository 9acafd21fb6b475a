"""Every output goes through the one safe writer: a symlink planted at an output's
name (as root, in a folder others may write) is replaced, never written through."""

from __future__ import annotations

import errno
import os
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from shrink.atomic import make_dirs, own_dir, write_text
from shrink.errors import WriteError
from shrink.export.csv import write_history, write_k6, write_stats
from shrink.export.hdr import write_hdr
from shrink.export.samples import RunSamples
from shrink.ingest.wsesslog import write_wsesslog
from shrink.loadcurve import ClassStats, Level, LevelStats, LoadCurve
from shrink.machine import Machine
from shrink.mat import mat
from shrink.report.build import write_report
from shrink.trace import Trace

pytestmark = pytest.mark.compute

OUTSIDE = "keep me: not shrink's to write"


def _runs() -> list[RunSamples]:
    rng = np.random.default_rng(0)
    n = 200
    intended = np.sort(rng.uniform(0.0, 2.0, n))
    return [
        RunSamples(
            rate_factor=1.0,
            window=(0.0, 2.0),
            epoch=1.7e9,
            intended=intended,
            done=intended + rng.exponential(0.002, n),
            ok=np.ones(n, dtype=bool),
            cls=np.array(["static"] * n),
            status=np.full(n, 200),
            nbytes=np.full(n, 1000),
            level=2.0,
        )
    ]


def _trace() -> Trace:
    return Trace.from_columns(
        {"session": [0, 0], "t": [0.0, 0.5], "path": ["/a", "/b"]}, meta={"mode": "session"}
    )


def _curve() -> LoadCurve:
    def rep(m: float, thr: float) -> LevelStats:
        st = ClassStats(n=1000, throughput=thr, mean=m, p50=m, p90=m, p99=m, p999=2 * m)
        return LevelStats(throughput=thr, overall=st, generator_cpu=0.02, send_lag_max=0.0)

    points = ((0.5, 0.002, 500), (1.0, 0.01, 900))
    return LoadCurve(levels=[Level(x, [rep(m, t), rep(m, t)]) for x, m, t in points])


def _report(out: Path) -> None:
    curve = _curve()
    prediction = {
        "thresholds": {"mean": 0.005},
        "mappings": {"1-replica": {"mean": mat(curve, "mean", 0.005).to_dict()}},
    }
    write_report(out, prediction, measured=curve)


# (output file name under the folder, the writer that makes it)
WRITERS: dict[str, tuple[str, Callable[[Path], object]]] = {
    "curve_stats.csv": ("curve_stats.csv", lambda d: write_stats(d / "curve_stats.csv", _runs())),
    "curve_stats_history.csv": (
        "curve_stats_history.csv",
        lambda d: write_history(d / "curve_stats_history.csv", _runs()),
    ),
    "curve_requests.csv": (
        "curve_requests.csv",
        lambda d: write_k6(d / "curve_requests.csv", _runs()),
    ),
    "hlog": ("curve-hdr/level-2.hlog", lambda d: write_hdr(d / "curve-hdr", _runs())),
    "hgrm": ("curve-hdr/level-2.hgrm", lambda d: write_hdr(d / "curve-hdr", _runs())),
    "report.md": ("report.md", _report),
    "report.html": ("report.html", _report),
    "latency.png": ("latency.png", _report),
    "curve.json": ("curve.json", lambda d: _curve().write_json(d / "curve.json")),
    "trace.parquet": ("t.parquet", lambda d: _trace().write_parquet(d / "t.parquet")),
    "trace.jsonl": ("t.jsonl", lambda d: _trace().write_jsonl(d / "t.jsonl")),
    "wsesslog": ("t.wsesslog", lambda d: write_wsesslog(_trace(), d / "t.wsesslog")),
    "machine.toml": (
        "m.toml",
        lambda d: Machine(name="m", sockets=1, cores_per_socket=2).write_toml(d / "m.toml"),
    ),
}


@pytest.mark.parametrize("which", sorted(WRITERS))
def test_a_symlink_at_an_output_is_replaced_never_written_through(tmp_path, which):
    name, writer = WRITERS[which]
    out = tmp_path / "out"
    (out / name).parent.mkdir(parents=True, exist_ok=True)
    victim = tmp_path / "victim"
    victim.write_text(OUTSIDE)
    (out / name).symlink_to(victim)
    writer(out)
    assert victim.read_text() == OUTSIDE
    assert not (out / name).is_symlink() and (out / name).is_file()
    assert (out / name).stat().st_size > 0
    assert not [p for p in out.rglob(".*") if p.name.endswith(".tmp")]  # no temp file left


def test_a_symlinked_export_folder_is_refused_and_nothing_is_written_there(tmp_path):
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (tmp_path / "curve-hdr").symlink_to(elsewhere)
    with pytest.raises(WriteError, match="curve-hdr"):
        write_hdr(tmp_path / "curve-hdr", _runs())
    assert list(elsewhere.iterdir()) == []


@pytest.mark.root
def test_a_folder_symlink_another_user_planted_is_not_followed(tmp_path):
    if os.geteuid() != 0:
        pytest.skip("needs root to plant a symlink owned by another user")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "b").symlink_to(elsewhere)  # where shrink will make b/c/
    os.lchown(tmp_path / "a" / "b", 65534, 65534)  # planted by nobody
    with pytest.raises(WriteError, match="owned by UID 65534"):
        write_text(tmp_path / "a" / "b" / "c" / "f.txt", "x")
    assert list(elsewhere.iterdir()) == []


@pytest.mark.root
@pytest.mark.parametrize("which", ["predict", "validate", "provider"])
def test_an_output_folder_is_not_made_through_a_symlink_another_user_planted(
    tmp_path, which, monkeypatch
):
    """The folders predict, validate and a testbed's run directory make for their files:
    ``mkdir(parents=True)`` would make them where a planted symlink points, as root."""
    if os.geteuid() != 0:
        pytest.skip("needs root to plant a symlink owned by another user")
    from shrink.predict import _write_curves
    from shrink.providers import TestbedProvider
    from shrink.share import Share
    from shrink.validate import Validation

    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "b").symlink_to(elsewhere)
    os.lchown(tmp_path / "a" / "b", 65534, 65534)  # planted by nobody
    out = tmp_path / "a" / "b" / "out"
    with pytest.raises(WriteError, match="owned by UID 65534"):
        if which == "predict":
            _write_curves(out, _curve(), None, {"mean": 0.01})
        elif which == "validate":
            Validation(mats={}).write_json(out / "validation.json")
        else:
            provider = TestbedProvider.__new__(TestbedProvider)  # no server is started:
            provider.run_dir, provider._opened = out, 0  # the folder comes first
            provider.recipe = None
            # (a testbed another test runs on CPU 0 meanwhile, the README's tour, is not
            # this test's: the crowded-CPU refusal came first in one CI run)
            monkeypatch.setattr("shrink.providers.refuse_crowded", lambda *_a: None)
            with provider.open(Share.whole([0]), "1-replica"):
                pass
    assert list(elsewhere.iterdir()) == []


def test_no_folder_is_made_through_a_planted_symlink_before_a_dot_dot(tmp_path):
    """``link/../new``: the kernel reaches ``..`` through the link, so ``new`` would be
    made beside where the link points; checking the path with ``..`` dropped by name
    (abspath) never looked at the link."""
    if os.geteuid() != 0:
        pytest.skip("needs root to plant a symlink owned by another user")
    elsewhere = tmp_path / "elsewhere"
    (elsewhere / "deep").mkdir(parents=True)
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "b").symlink_to(elsewhere / "deep")
    os.lchown(tmp_path / "a" / "b", 65534, 65534)  # planted by nobody
    with pytest.raises(WriteError, match="owned by UID 65534"):
        write_text(tmp_path / "a" / "b" / ".." / "new" / "f.txt", "x")
    assert sorted(p.name for p in elsewhere.iterdir()) == ["deep"]


def test_missing_folders_are_made_and_an_own_symlink_is_followed(tmp_path):
    assert make_dirs(tmp_path / "x" / "y").is_dir() and own_dir(tmp_path / "x" / "y")
    (tmp_path / "mine").symlink_to(tmp_path / "x")  # the user's own link: kept working
    write_text(tmp_path / "mine" / "z" / "f.txt", "x")
    assert (tmp_path / "x" / "z" / "f.txt").read_text() == "x"


def test_the_error_is_one_line_naming_the_file(tmp_path):
    (tmp_path / "curve-hdr").symlink_to(tmp_path)
    with pytest.raises(WriteError) as e:
        write_hdr(tmp_path / "curve-hdr", _runs())
    assert "\n" not in str(e.value) and str(tmp_path / "curve-hdr") in str(e.value)
    assert os.path.islink(tmp_path / "curve-hdr")


def test_a_temporary_name_swapped_for_a_symlink_is_never_written_through(tmp_path, monkeypatch):
    """In a folder another user may write, the temporary file's name is visible: they can
    unlink it and plant a symlink there while the data is written. The writer writes
    through the file it opened, and the swapped name is not renamed into place."""
    import pyarrow.parquet as pq

    from shrink import parquet_meta

    out = tmp_path / "out"
    out.mkdir()
    victim = tmp_path / "victim"
    victim.write_text(OUTSIDE)
    real = pq.write_table

    def swap_then_write(table, where, **kw):
        for tmp in out.glob(".t.parquet.*.tmp"):
            tmp.unlink()
            tmp.symlink_to(victim)  # what the other user does, between open and write
        return real(table, where, **kw)

    monkeypatch.setattr(parquet_meta.pq, "write_table", swap_then_write)
    with pytest.raises(WriteError, match="replaced by someone else"):
        _trace().write_parquet(out / "t.parquet")
    assert victim.read_text() == OUTSIDE
    assert not (out / "t.parquet").exists()


@pytest.mark.root
def test_a_runlog_folder_symlink_another_user_planted_is_not_followed(tmp_path):
    """``--runlogs DIR``: the run log is created in DIR before the run; a folder on the
    way that is a symlink another user planted is refused, as for every other output."""
    if os.geteuid() != 0:
        pytest.skip("needs root to plant a symlink owned by another user")
    from shrink.replay.writer import RunLogWriter

    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (tmp_path / "runlogs").symlink_to(elsewhere)
    os.lchown(tmp_path / "runlogs", 65534, 65534)  # planted by nobody
    with pytest.raises(WriteError, match="owned by UID 65534"):
        RunLogWriter(tmp_path / "runlogs" / "run000-rf1.parquet")
    assert list(elsewhere.iterdir()) == []


@pytest.mark.root
def test_a_folder_swapped_for_a_symlink_after_the_check_is_not_written_through(
    tmp_path, monkeypatch
):
    """In a folder another user owns, they may rename a checked folder away and plant a
    symlink in its place between the check and the write: the write goes to the folder
    that was checked, held open, never through the symlink."""
    if os.geteuid() != 0:
        pytest.skip("needs root to plant a symlink owned by another user")
    import shrink.atomic as atomic

    theirs = tmp_path / "theirs"
    (theirs / "out").mkdir(parents=True)
    os.chown(theirs, 65534, 65534)
    elsewhere = tmp_path / "elsewhere"  # /etc, say
    elsewhere.mkdir()
    real_make_dirs = atomic.make_dirs

    def check_then_swap(folder, mode=0o755):
        done = real_make_dirs(folder, mode)
        if Path(folder) == theirs / "out" and not (theirs / "out").is_symlink():
            (theirs / "out").rename(theirs / "moved")  # what nobody does, just after the check
            (theirs / "out").symlink_to(elsewhere)
            os.lchown(theirs / "out", 65534, 65534)
        return done

    monkeypatch.setattr(atomic, "make_dirs", check_then_swap)
    with pytest.raises(WriteError, match="owned by UID 65534"):
        write_text(theirs / "out" / "prediction.json", "{}")
    assert list(elsewhere.iterdir()) == []


def test_a_folder_reached_through_own_symlinks_and_dots_is_opened(tmp_path):
    from shrink.atomic import open_dir

    (tmp_path / "a" / "b").mkdir(parents=True)
    (tmp_path / "rel").symlink_to("a/b")
    (tmp_path / "abs").symlink_to(tmp_path / "a")
    for folder in (tmp_path / "rel", tmp_path / "abs" / "b", tmp_path / "a" / "b" / ".." / "b"):
        fd = open_dir(folder)
        try:
            assert os.path.samestat(os.fstat(fd), os.stat(tmp_path / "a" / "b")), folder
        finally:
            os.close(fd)
    write_text(tmp_path / "rel" / "f.txt", "x")
    assert (tmp_path / "a" / "b" / "f.txt").read_text() == "x"


@pytest.mark.root
def test_a_runlog_folder_swapped_after_the_check_is_not_written_through(tmp_path, monkeypatch):
    if os.geteuid() != 0:
        pytest.skip("needs root to plant a symlink owned by another user")
    from shrink.replay import writer as writer_mod

    theirs = tmp_path / "theirs"
    (theirs / "runlogs").mkdir(parents=True)
    os.chown(theirs, 65534, 65534)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    real_make_dirs = writer_mod.make_dirs

    def check_then_swap(folder, mode=0o755):
        done = real_make_dirs(folder, mode)
        (theirs / "runlogs").rename(theirs / "moved")
        (theirs / "runlogs").symlink_to(elsewhere)
        os.lchown(theirs / "runlogs", 65534, 65534)
        return done

    monkeypatch.setattr(writer_mod, "make_dirs", check_then_swap)
    with pytest.raises(WriteError, match="owned by UID 65534"):
        writer_mod.RunLogWriter(theirs / "runlogs" / "run000-rf1.parquet")
    assert list(elsewhere.iterdir()) == []


def test_a_deleted_current_folder_stops_only_relative_paths(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # An absolute -o failed "cannot write (No such file or directory)" though its folder
    # existed (every write made its path absolute through os.getcwd), and a relative one
    # said only "error: No such file or directory".
    from typer.testing import CliRunner

    from shrink.cli import app

    gone = tmp_path / "gone"
    gone.mkdir()
    monkeypatch.chdir(gone)
    gone.rmdir()
    args = ["synth", "tcp", "--rate", "10", "--duration", "2s", "-o"]
    r = CliRunner().invoke(app, [*args, str(tmp_path / "t.parquet")])
    assert r.exit_code == 0, r.output
    assert (tmp_path / "t.parquet").is_file()
    r = CliRunner().invoke(app, [*args, "t.parquet"])
    text = " ".join(r.output.split())
    assert r.exit_code == 1, text
    shown = "error: the current folder was deleted: give absolute paths, or run from one"
    assert text == shown, text


@pytest.mark.parametrize("name", ["n" * 255, "é" * 127, "x" * 238 + ".parquet"])
def test_a_name_as_long_as_a_file_name_may_be_is_written(tmp_path: Path, name: str) -> None:
    """A name of 238 to 255 bytes, legal on the file system, was refused as "File name
    too long": its temporary twin (``.NAME.<12 hex>.tmp``) was past 255 bytes."""
    path = write_text(tmp_path / name, "x")
    assert path.read_text() == "x" and [p.name for p in tmp_path.iterdir()] == [name]


@pytest.mark.compute
def test_a_trace_whose_meta_its_reader_refuses_is_not_written(tmp_path: Path) -> None:
    """``Trace.from_columns(..., meta={"mode": "closed"})`` wrote a Parquet trace that
    ``read_parquet`` refused ("mode: Input should be 'session' or 'open'"); a RunLog's
    meta is checked the same way against its reader's model."""
    tr = Trace.from_columns(
        {"session": [0, 0], "t": [0.0, 0.5], "path": ["/a", "/b"]}, meta={"mode": "closed"}
    )
    with pytest.raises(ValueError, match=r"could not be read back: .*mode: Input should be"):
        tr.write_parquet(tmp_path / "t.parquet")
    assert not list(tmp_path.iterdir())
    tr.meta["mode"] = "session"
    assert Trace.read_parquet(tr.write_parquet(tmp_path / "t.parquet")).meta["mode"] == "session"


@pytest.mark.root
def test_a_user_writes_below_a_folder_it_may_pass_through_but_not_list():
    """A user who is not root, writing in its own folder below one of mode 0711 (a home
    folder, say): every output was "cannot write (Permission denied, EACCES)", as the
    folders on the way were opened to be read, where a plain open() wrote."""
    import shutil
    import tempfile

    if os.geteuid() != 0:
        pytest.skip("needs root to run as another user")
    top = Path(tempfile.mkdtemp())  # (reachable by nobody, as tmp_path is not)
    try:
        top.chmod(0o711)  # passed through, not listed
        mine = top / "mine"
        mine.mkdir()
        os.chown(mine, 65534, 65534)
        pid = os.fork()
        if pid == 0:  # pragma: no cover (the child)
            code = 2
            try:
                os.setgid(65534)
                os.setuid(65534)
                write_text(mine / "out" / "f.txt", "x")  # a folder made, and a file in it
                code = 0
            except WriteError as exc:
                os.write(2, f"{exc}\n".encode())
                code = 1
            finally:
                os._exit(code)
        _, status = os.waitpid(pid, 0)
        assert os.waitstatus_to_exitcode(status) == 0
        assert (mine / "out" / "f.txt").read_text() == "x"
    finally:
        shutil.rmtree(top)


@pytest.mark.root
def test_a_parent_swapped_for_a_symlink_before_its_folder_is_made_is_not_followed(
    tmp_path, monkeypatch
):
    """``make_dirs`` checked the folders that exist, then made the missing ones by name:
    another user who renamed a checked folder away and planted a symlink in its place
    before the ``mkdir`` had root make the folder where the symlink led (a loop of
    renames hit it in 2 of 200 writes). Made in the parent held open, it is made in the
    folder that was checked."""
    if os.geteuid() != 0:
        pytest.skip("needs root to plant a symlink owned by another user")
    import shrink.atomic as atomic

    theirs = tmp_path / "theirs"
    (theirs / "x").mkdir(parents=True)
    os.chown(theirs, 65534, 65534)
    elsewhere = tmp_path / "elsewhere"  # /etc, say
    elsewhere.mkdir()
    real_mkdir = os.mkdir

    def swap_then_mkdir(path, mode=0o777, *, dir_fd=None):
        if not (theirs / "x").is_symlink():  # what nobody does, just before the mkdir
            (theirs / "x").rename(theirs / "moved")
            (theirs / "x").symlink_to(elsewhere)
            os.lchown(theirs / "x", 65534, 65534)
        return real_mkdir(path, mode, dir_fd=dir_fd)

    monkeypatch.setattr(atomic.os, "mkdir", swap_then_mkdir)
    make_dirs(theirs / "x" / "y")
    monkeypatch.undo()
    assert list(elsewhere.iterdir()) == []
    assert (theirs / "moved" / "y").is_dir()


def test_a_dotdot_goes_back_to_the_folder_walked_not_where_it_was_moved(tmp_path, monkeypatch):
    """``-o ../out.json`` run in another user's folder ``w``: the walk opened ``..`` by
    name, so a ``w`` moved meanwhile (by its owner, to a folder they may write, ``/tmp``)
    led to that folder's parent, and the file was written there, outside the folder
    the path named."""
    import shrink.atomic as atomic
    from shrink.atomic import open_dir

    (tmp_path / "home" / "nb" / "w").mkdir(parents=True)
    (tmp_path / "tmp").mkdir()
    real_open = os.open

    def open_then_move(path, flags, mode=0o777, *, dir_fd=None):
        fd = real_open(path, flags, mode, dir_fd=dir_fd)
        if path == "w":  # just after the walk passed through it
            (tmp_path / "home" / "nb" / "w").rename(tmp_path / "tmp" / "w")
        return fd

    monkeypatch.setattr(atomic.os, "open", open_then_move)
    fd = open_dir(tmp_path / "home" / "nb" / "w" / "..")
    monkeypatch.undo()
    try:
        assert os.path.samestat(os.fstat(fd), os.stat(tmp_path / "home" / "nb"))
    finally:
        os.close(fd)


def test_a_path_deeper_than_the_descriptors_one_may_open_is_written(tmp_path: Path) -> None:
    """The walk kept every folder on the way open: a path ~1,000 folders deep (the kernel
    walks it, within PATH_MAX) was 'Too many open files' at the usual limit of 1,024."""
    import resource

    deep = tmp_path.joinpath(*["d"] * 300)
    os.makedirs(deep)
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    in_use = len(os.listdir("/proc/self/fd"))
    resource.setrlimit(resource.RLIMIT_NOFILE, (in_use + 100, hard))
    try:
        write_text(deep / "out.json", "{}\n")
        # A '..' back past the folders held open is walked again from "/" by name.
        back = deep.joinpath(*[".."] * 250, "back.json")
        write_text(back, "{}\n")
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
    assert (deep / "out.json").read_text() == "{}\n"
    assert tmp_path.joinpath(*["d"] * 50, "back.json").read_text() == "{}\n"
    assert len(os.listdir("/proc/self/fd")) == in_use  # none left open


def test_a_dotdot_past_the_folders_held_never_lands_in_a_folder_put_in_a_moved_ones_place(
    tmp_path, monkeypatch
):
    """A '..' back past the 64 folders held open was walked again from "/" by name alone:
    a folder on the way moved meanwhile, and another one made under its name, led the
    walk into that other folder, not back to the folder walked."""
    import shrink.atomic as atomic
    from shrink.atomic import open_dir

    deep = tmp_path.joinpath("shared", "w", *["d"] * 70)
    os.makedirs(deep)
    real_open = os.open
    seen = []

    def open_then_swap(path, flags, mode=0o777, *, dir_fd=None):
        fd = real_open(path, flags, mode, dir_fd=dir_fd)
        seen.append(path)
        if seen.count("d") == 70 and path == "d":  # the walk at the bottom: w swapped
            (tmp_path / "shared" / "w").rename(tmp_path / "shared" / "moved")
            os.makedirs(tmp_path.joinpath("shared", "w", *["d"] * 70))
        return fd

    monkeypatch.setattr(atomic.os, "open", open_then_swap)
    try:
        fd = open_dir(deep.joinpath(*[".."] * 69))
    except OSError as exc:
        assert exc.errno == errno.ESTALE, exc
    else:
        try:  # the folder walked, or refused: never the one put in its place
            assert os.path.samestat(os.fstat(fd), os.stat(tmp_path / "shared" / "moved" / "d"))
        finally:
            os.close(fd)
    finally:
        monkeypatch.undo()


@pytest.mark.root
def test_a_user_writes_in_a_folder_it_may_write_and_pass_but_not_list():
    """A folder of mode 0311 (a drop box): the kernel lets its owner make, rename and
    unlink names in it, and the output check let -o there through; the write held the
    folder opened to be read, so the run's file was lost after it ran ("cannot write
    (Permission denied, EACCES)"), a rewrite and a RunLog alike."""
    import shutil
    import tempfile

    from shrink.replay.writer import RunLogWriter

    if os.geteuid() != 0:
        pytest.skip("needs root to run as another user")
    top = Path(tempfile.mkdtemp())  # (reachable by nobody, as tmp_path is not)
    try:
        top.chmod(0o711)
        box = top / "box"
        box.mkdir()
        os.chown(box, 65534, 65534)
        box.chmod(0o311)  # written and passed through by its owner, never listed
        pid = os.fork()
        if pid == 0:  # pragma: no cover (the child)
            code = 2
            try:
                os.setgid(65534)
                os.setuid(65534)
                write_text(box / "f.txt", "x")
                write_text(box / "f.txt", "y")  # a rewrite: not put aside as another's
                w = RunLogWriter(box / "r.parquet")
                w.close()
                code = 0
            except (WriteError, OSError) as exc:
                os.write(2, f"{exc}\n".encode())
                code = 1
            finally:
                os._exit(code)
        _, status = os.waitpid(pid, 0)
        assert os.waitstatus_to_exitcode(status) == 0
        box.chmod(0o755)
        assert (box / "f.txt").read_text() == "y"
        assert sorted(p.name for p in box.iterdir()) == ["f.txt", "r.parquet"]
    finally:
        shutil.rmtree(top)


@pytest.mark.root
def test_an_output_through_another_users_symlink_is_refused_before_the_run(tmp_path):
    """-o through a folder symlink another user owns passed the output check; the run
    ran, and then its file was "cannot write (a symlink owned by UID 65534, not
    followed)": the check now walks the folder as the write does."""
    from shrink.errors import ParameterError
    from shrink.files import check_output

    if os.geteuid() != 0:
        pytest.skip("needs root to give a symlink to another user")
    (tmp_path / "real").mkdir()
    (tmp_path / "theirs").symlink_to("real")
    os.lchown(tmp_path / "theirs", 65534, 65534)
    (tmp_path / "mine").symlink_to("real")
    for out, kind in ((tmp_path / "theirs" / "c.json", "file"), (tmp_path / "theirs", "dir")):
        with pytest.raises(ParameterError, match=r"symlink owned by UID 65534, not followed"):
            check_output(out, kind=kind)
    assert check_output(tmp_path / "mine" / "c.json") == tmp_path / "mine" / "c.json"
    assert check_output(tmp_path / "mine", kind="dir") == tmp_path / "mine"
