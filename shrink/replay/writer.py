"""Incremental RunLog writer: what was measured survives an interrupted run.

The engine appends one row per finished (or failed) request to plain Python
lists, cheap enough for the hot path; :meth:`RunLogWriter.maybe_flush` turns them
into a Parquet row group every ``flush_rows`` rows or ``flush_seconds`` seconds.
Strings that repeat (class, target, error) are kept as small integer codes until
the flush. :meth:`close` writes the rest and the footer; it is called from a
``finally`` so Ctrl-C, a crashed server or an engine error still leave a readable
file with every row measured so far.

Memory is bounded by the batch, not the run: a flushed row group goes to disk and
is not kept (:meth:`runlog` reads the file back). Only a writer without a path
keeps its tables.

The file is written under a temporary name in the same folder (created with
``O_EXCL | O_NOFOLLOW``) and renamed over ``path`` when closed, so ``path`` only
ever holds a whole RunLog. A full disk must not cost the rows already written:
the writer holds a reserve (:data:`RESERVE_BYTES`, allocated beside the file) and
on the first write error frees it and finishes that write. Where a smaller reserve,
enough to finish the file, then still fits, only the reserve had filled the disk and
the run goes on; else the writer writes the footer and stops (:attr:`RunLogWriter.error`;
later rows are dropped and counted). The file then holds every row up to the failure.
Another write error (EIO, a footer that does not fit) inside a row group or the footer
keeps the whole row groups before it: the Parquet writer finishes in memory, and the file
is cut back to them with a footer of its own (:meth:`RunLogWriter._salvage`).
"""

from __future__ import annotations

import contextlib
import errno
import io
import os
import resource
import time
from array import array
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from shrink.atomic import make_dirs, note_written, open_exclusive, pass_dir, replaced_by_another
from shrink.errors import WriteError
from shrink.jsonout import dumps
from shrink.parquet_read import arrow_source
from shrink.runlog import META_KEY, RUNLOG_SCHEMA, RunLog

__all__ = ["RESERVE_BYTES", "WRITER_SCHEMA", "RunLogRow", "RunLogWriter"]

# Room kept free for the last row group and the footer when the disk fills: a
# flush of 65,536 rows is about 6 MB before compression.
RESERVE_BYTES = 8 << 20
# What the reserve is cut to once spent on a write that did fit (twice the largest row
# group, and this much per row group and over for the footer): on a disk with between
# 8 MiB and 8 MiB and a run's log free, the reserve itself had filled it, and a run of
# 57 KB kept 200 of its 1,000 rows, "no space left" with 8 MiB free.
FOOTER_ROOM = 64 << 10
ROW_GROUP_ROOM = 4 << 10
# A full disk, or a full quota (the reserve counts against it too, and frees it)
_FULL = (errno.ENOSPC, errno.EDQUOT)

# array typecodes of the columns, in WRITER_SCHEMA order
_TYPECODES = ("d", "d", "d", "d", "i", "q", "b", "q", "i", "i", "d")

# The RunLog columns plus ``dispatched``: when the engine handed the request to a
# connection (or began connecting for it). ``dispatched - intended`` is the
# generator's own lateness; ``sent`` also includes the server's TCP accept.
WRITER_SCHEMA = pa.schema([*RUNLOG_SCHEMA, pa.field("dispatched", pa.float64())])


class RunLogRow(NamedTuple):
    """One request's row, in :data:`WRITER_SCHEMA`'s order; ``cls_code``, ``target_code``
    and ``error_code`` from the writer's ``cls``, ``targets`` and ``errors``."""

    intended: float
    sent: float
    first_byte: float
    done: float
    status: int
    nbytes: int
    cls_code: int
    session: int
    target_code: int
    error_code: int
    dispatched: float = float("nan")


class _Codes:
    """A string <-> small int table (the hot path stores ints)."""

    def __init__(self, initial: tuple[str, ...] = ()) -> None:
        self.names: list[str] = list(initial)
        self.index: dict[str, int] = {n: i for i, n in enumerate(self.names)}

    def code(self, name: str) -> int:
        i = self.index.get(name)
        if i is None:
            i = self.index[name] = len(self.names)
            self.names.append(name)
        return i


def _readable(path: Path, rows: int) -> bool:
    """``path`` has a footer, and it tells the ``rows`` written: a write error in the middle
    of a row group left that group's first columns in the file, and the footer the Parquet
    writer added all the same named the whole group (500 rows said, none readable: 'Column
    10 ... expected length 500 but got length 0'), and the file was put in place."""
    try:
        with arrow_source(path) as src:
            pf = pq.ParquetFile(src)
            told = pf.metadata.num_rows
            pf.close()
    except (OSError, pa.ArrowInvalid):
        return False
    return told == rows


class _Sink(io.RawIOBase):
    """The Parquet writer's file: counts its position, and spends the reserve on ENOSPC.

    A write that fails otherwise is not raised to the Parquet writer: raised at inside a
    row group, it wrote no footer at all, and the whole file was lost. From there on what
    it writes is kept in memory (:attr:`kept`: the rest of that row group, then its footer
    at close), and :attr:`lost_at` says where the file stopped.
    """

    def __init__(self, fd: int, reserve: Path | None) -> None:
        super().__init__()
        self.fd = fd
        self.pos = 0
        self.reserve = reserve
        self.error: OSError | None = None
        self.lost_at: int | None = None
        self.kept = bytearray()

    def writable(self) -> bool:
        return True

    def write(self, data: Any) -> int:
        view = memoryview(data).cast("B")
        n, off = len(view), 0
        while off < n and self.lost_at is None:
            try:
                off += os.write(self.fd, view[off:])
            except OSError as exc:
                if self.error is None:
                    self.error = exc
                if exc.errno in _FULL and self.reserve is not None:
                    # the reserve's blocks are free again: finish this write and the footer
                    with contextlib.suppress(OSError):
                        self.reserve.unlink()
                    self.reserve = None
                    continue
                # (a short write before the error put its first ``off`` bytes in the file)
                self.error, self.lost_at = exc, self.pos + off
        if self.lost_at is not None:
            self.kept += view[off:]
        self.pos += n
        return n

    def tell(self) -> int:
        return self.pos

    def close(self) -> None:
        if not self.closed:
            os.close(self.fd)
            if self.reserve is not None:
                with contextlib.suppress(OSError):
                    self.reserve.unlink()
                self.reserve = None
        super().close()


class RunLogWriter:
    """Append-only RunLog rows, flushed to ``path`` as Parquet row groups.

    ``path=None`` keeps everything in memory (tests, in-process sweeps).
    """

    def __init__(
        self,
        path: str | Path | None,
        meta: dict[str, Any] | None = None,
        *,
        flush_rows: int = 65536,
        flush_seconds: float = 1.0,
    ) -> None:
        self.path = None if path is None else Path(path)
        self.meta: dict[str, Any] = dict(meta or {})
        self.flush_rows = flush_rows
        self.flush_seconds = flush_seconds
        self.cls = _Codes(("static", "dynamic"))
        self.targets = _Codes()
        self.errors = _Codes(("",))
        # Typed arrays, one per column: appends are cheap, and a flush copies
        # them out as memory rather than converting Python objects (which would
        # stall the event loop for milliseconds at high rates).
        self.cols_ = tuple(array(code) for code in _TYPECODES)
        self.appends = tuple(c.append for c in self.cols_)
        self._tables: list[pa.Table] = []  # only without a path (the in-memory RunLog)
        self._writer: pq.ParquetWriter | None = None
        self._sink: _Sink | None = None
        self._tmp: Path | None = None
        self._opened = False
        self._last_flush = time.monotonic()
        self.rows = 0
        self._groups = 0  # row groups written, and the largest's bytes (for _retake)
        self._largest = 0
        self._whole_end = 0  # where the last whole row group ends in the file
        self._footer_at: int | None = None  # where the footer starts, past a broken group
        self._bare_footer: int | None = None  # a footer with no row group (ulimit -f)
        self.dropped = 0  # rows not written because a write had failed
        self.error: WriteError | None = None
        self._cause: OSError | None = None  # the OS error behind :attr:`error`
        self.closed = False
        self._whole = False  # no write error before close(): a file kept holds every row
        self._schema = WRITER_SCHEMA
        self._fd = -1
        self._dir_fd = -1  # the file's folder, held: what is made and renamed stays in it
        if self.path is not None:
            # The file is created now, before anything is measured: a path that
            # cannot be written is an error before the run, not after it.
            try:
                # Never through a folder symlink another user planted (--runlogs DIR),
                # nor one swapped in after the check: the folder is held open.
                make_dirs(self.path.parent)
                self._dir_fd = pass_dir(self.path.parent)  # (no read right needed: pass_dir)
                self._fd, self._tmp = open_exclusive(self.path, dir_fd=self._dir_fd)
            except OSError as exc:
                self._close_dir()
                raise WriteError(self.path, exc) from exc

    def _close_dir(self) -> None:
        if self._dir_fd >= 0:
            os.close(self._dir_fd)
            self._dir_fd = -1

    def _open(self) -> None:
        """Open the file at the first flush, so ``meta`` may be completed until then."""
        self._opened = True
        self._schema = WRITER_SCHEMA.with_metadata(
            {META_KEY: dumps(self.meta, sort_keys=True, default=str).encode()}
        )
        if self.path is None or self._writer is not None:
            return
        assert self._tmp is not None
        self._sink = _Sink(self._fd, self._reserve())
        try:
            self._writer = pq.ParquetWriter(self._sink, self._schema, compression="zstd")
            if self._sink.error is not None and self._sink.lost_at is not None:
                raise self._sink.error
        except OSError as exc:  # not even the header fits: nothing to keep
            self._writer = None
            self._fail(exc)
            self._sink.close()
            self._tmp.unlink(missing_ok=True)

    def _reserve(self, size: int = RESERVE_BYTES) -> Path | None:
        """Allocate the reserve beside the file (None where the disk is already too full)."""
        assert self.path is not None
        try:
            fd, reserve = open_exclusive(self.path, suffix=".reserve", dir_fd=self._dir_fd)
        except OSError:
            return None
        try:
            os.posix_fallocate(fd, 0, size)
        except OSError:
            os.close(fd)
            reserve.unlink(missing_ok=True)
            return None
        os.close(fd)
        return reserve

    def add(self, row: RunLogRow) -> None:
        """One request's row (the engine's hot path appends to :attr:`appends` itself)."""
        for append, value in zip(self.appends, row, strict=True):
            append(value)

    def pending(self) -> int:
        return len(self.cols_[0])

    def maybe_flush(self, now: float | None = None) -> None:
        """Flush if enough rows or time have accumulated (called off the hot path)."""
        n = self.pending()
        if not n:
            return
        now = time.monotonic() if now is None else now
        if n >= self.flush_rows or now - self._last_flush >= self.flush_seconds:
            self.flush()

    def _dict_column(self, codes: np.ndarray, names: list[str]) -> pa.Array:
        idx = pa.array(codes.astype(np.int32))
        return pa.DictionaryArray.from_arrays(idx, pa.array(names, pa.string())).cast(pa.string())

    def flush(self) -> None:
        """Write the pending rows as one row group (dropped, and counted, after an error)."""
        n = self.pending()
        self._last_flush = time.monotonic()
        if not n:
            return
        if not self._opened and self.error is None:
            self._open()
        if self.error is not None:
            for col in self.cols_:
                del col[:]
            self.dropped += n
            return
        c = []
        for col in self.cols_:
            c.append(np.frombuffer(col, dtype=col.typecode).copy())
            del col[:]
        arrays = [
            pa.array(c[0], pa.float64()),
            pa.array(c[1], pa.float64()),
            pa.array(c[2], pa.float64()),
            pa.array(c[3], pa.float64()),
            pa.array(c[4], pa.int32()),
            pa.array(c[5], pa.int64()),
            self._dict_column(c[6], self.cls.names),
            pa.array(c[7], pa.int64()),
            self._dict_column(c[8], self.targets.names),
            self._dict_column(c[9], self.errors.names),
            pa.array(c[10], pa.float64()),
        ]
        table = pa.Table.from_arrays(arrays, schema=self._schema)
        if self.path is None:
            self._tables.append(table)
            self.rows += n
            return
        assert self._writer is not None and self._sink is not None
        # Under ``ulimit -f`` the rows that fit go out, the rest stop the writer before the
        # limit, not at it: a file cut there has no footer, and a replay -o under the limit
        # lost every row (the file removed). Each part written tells the next one's size.
        fit = self._rows_under_limit(table)
        while 0 < fit < table.num_rows and self._write(table.slice(0, fit)):
            self.rows += fit
            table = table.slice(fit)
            fit = self._rows_under_limit(table)
        n = table.num_rows
        if fit < n:
            self._fail(OSError(errno.EFBIG, os.strerror(errno.EFBIG)))
            self.dropped += n
            return
        if not self._write(table):
            self.dropped += n
            return
        self.rows += n
        if self._sink.error is not None and not self._retake():
            self._fail(self._sink.error)  # this row group made it, on the reserve

    def _write(self, table: pa.Table) -> bool:
        """One row group; False (the error kept) where the reserve could not cover it."""
        assert self._writer is not None and self._sink is not None
        start = self._sink.pos
        try:
            self._writer.write_table(table)
        except OSError as exc:  # what is on disk is lost
            self._fail(exc)
            return False
        if self._sink.lost_at is not None:  # cut inside this group: the groups before stay
            assert self._sink.error is not None
            self._fail(self._sink.error)
            self._sink.kept.clear()  # (only the footer, written at close, is wanted)
            self._footer_at = self._sink.pos
            return False
        self._groups += 1
        self._largest = max(self._largest, self._sink.pos - start)
        self._whole_end = self._sink.pos
        return True

    def _rows_under_limit(self, table: pa.Table) -> int:
        """How many of ``table``'s first rows fit under the file-size limit (RLIMIT_FSIZE)
        with the footer after them: each try is encoded in memory, as it would be written."""
        n = table.num_rows
        limit = resource.getrlimit(resource.RLIMIT_FSIZE)[0]
        if limit == resource.RLIM_INFINITY or not n:
            return n
        fit = n
        for _ in range(12):
            if self._fits(table.slice(0, fit), limit):
                return fit
            fit = int(fit * 0.7)
            if not fit:
                break
        return 0

    def _encoded(self, part: pa.Table | None) -> tuple[int, int]:
        """The bytes of ``part`` as one row group, and of the footer of a file of it alone."""
        buf = pa.BufferOutputStream()
        with pq.ParquetWriter(buf, self._schema, compression="zstd") as w:
            if part is not None:
                w.write_table(part)
        data = buf.getvalue()
        footer = pq.read_metadata(pa.BufferReader(data)).serialized_size
        return data.size - footer - 12, footer  # PAR1, the footer's length, PAR1

    def _fits(self, part: pa.Table, limit: int) -> bool:
        assert self._sink is not None
        if self._bare_footer is None:
            self._bare_footer = self._encoded(None)[1]
        data, footer = self._encoded(part)
        # the footer grows by a row group's entry for each one written (statistics vary:
        # half a KiB spare each, and a KiB)
        entry = footer - self._bare_footer + 512
        return self._sink.pos + data + footer + entry * self._groups + 1036 <= limit

    def _retake(self) -> bool:
        """After the reserve was spent on a write that then fitted: take a smaller one,
        enough to finish the file. Where it fits the disk was not full (the reserve had
        filled it) and the run goes on; where it does not, the writer stops."""
        sink = self._sink
        assert sink is not None and sink.error is not None
        if sink.error.errno not in _FULL or sink.reserve is not None:
            return False
        need = 2 * self._largest + ROW_GROUP_ROOM * self._groups + FOOTER_ROOM
        sink.reserve = self._reserve(min(need, RESERVE_BYTES))
        if sink.reserve is None:
            return False
        sink.error = None
        return True

    def _fail(self, exc: OSError) -> None:
        """Stop at the first write error: later rows are dropped, the footer still goes out."""
        if self.error is None:
            assert self.path is not None
            self.error, self._cause = WriteError(self.path, exc), exc

    def close(self) -> None:
        """Flush, write the footer and move the file into place; safe to call twice.

        A write error leaves :attr:`error` set (the caller reports it); the file then
        holds the rows written before it.
        """
        if self.closed:
            return
        self._whole = self.error is None  # (an error from here on cuts no row off the run)
        try:
            self.flush()
            if not self._opened:
                self._open()  # an empty run still leaves a readable file
        finally:
            self.closed = True
            try:
                self._finish()
            finally:
                self._close_dir()

    def discard(self) -> None:
        """Give the file up unwritten (a run stopped before its engine took over): the
        temporary file and its reserve are removed, nothing is put in place."""
        if self.closed:
            return
        self.closed = True
        if self._sink is not None:
            with contextlib.suppress(OSError):
                self._sink.close()
        elif self._fd >= 0:
            with contextlib.suppress(OSError):
                os.close(self._fd)
        if self._tmp is not None:
            self._tmp.unlink(missing_ok=True)
        self._close_dir()

    def _finish(self) -> None:
        if self._writer is None:
            return
        try:
            self._writer.close()
        except OSError as exc:
            self._fail(exc)
        finally:
            if self._sink is not None:
                self._sink.close()
        if self._sink is not None and self._sink.error and self._sink.lost_at is not None:
            self._fail(self._sink.error)  # (the footer's write, when nothing failed before)
        if self._tmp is None or self.path is None:
            return
        if (
            self.error is not None
            and not _readable(self._tmp, self.rows)
            and (not self._salvage() or not _readable(self._tmp, self.rows))
        ):
            self._tmp.unlink(missing_ok=True)  # never put a file without a footer in place
            return
        try:
            if (alt := replaced_by_another(self._tmp, self.path, self._dir_fd)) is not None:
                self._fail(
                    OSError(
                        errno.EEXIST,
                        f"another run wrote it while this one ran; left as it is, this "
                        f"run's is {alt}",
                    )
                )
                self.path = alt  # (read back from there: not the other run's rows)
                return
            os.replace(
                self._tmp.name, self.path.name, src_dir_fd=self._dir_fd, dst_dir_fd=self._dir_fd
            )
            note_written(self.path, self._dir_fd)
            if self.error is not None and self._cause is not None:
                # "cannot write" alone, of a file then put in place: read as a whole run
                self.error = WriteError(
                    self.path,
                    self._cause,
                    cut_after=self.rows,
                    whole=self._whole and not self.dropped,
                )
        except OSError as exc:
            self._fail(exc)

    def _salvage(self) -> bool:
        """After a write error inside a row group (or the footer), keep the whole row groups
        before it: the file is cut where the last whole one ends and the footer the Parquet
        writer wrote to memory put there; it names the broken group too, so the whole ones
        are then copied, group by group, into a new file. False (nothing kept) where no
        group was whole, or the footer or the copy cannot be written."""
        sink, tmp = self._sink, self._tmp
        if sink is None or tmp is None or sink.lost_at is None or not self._groups:
            return False
        new: Path | None = None
        try:
            fd = os.open(tmp.name, os.O_RDWR | os.O_NOFOLLOW, dir_fd=self._dir_fd)
            try:
                # the footer's first writes, where a later one of it failed, are in the file
                at = self._whole_end if self._footer_at is None else self._footer_at
                tail = os.pread(fd, max(0, sink.lost_at - at), at) + bytes(sink.kept)
                size = int.from_bytes(tail[-8:-4], "little") + 8 if tail.endswith(b"PAR1") else 0
                if not 8 < size <= len(tail):
                    return False
                os.ftruncate(fd, self._whole_end)
                if os.pwrite(fd, tail[-size:], self._whole_end) != size:
                    return False
            finally:
                os.close(fd)
            if _readable(tmp, self.rows):
                return True  # the footer's write was the one that failed: it names no more
            fd, new = open_exclusive(self.path, dir_fd=self._dir_fd)  # type: ignore[arg-type]
            out = _Sink(fd, None)
            try:
                with (
                    arrow_source(tmp) as src,
                    pq.ParquetFile(src) as pf,
                    pq.ParquetWriter(out, self._schema, compression="zstd") as copy,
                ):
                    for i in range(self._groups):
                        copy.write_table(pf.read_row_group(i, use_threads=False))
            finally:
                out.close()
            if out.lost_at is not None:
                raise out.error or OSError(errno.EIO, os.strerror(errno.EIO))
        except (OSError, pa.ArrowException):
            if new is not None:
                new.unlink(missing_ok=True)
            return False
        tmp.unlink(missing_ok=True)
        self._tmp = new
        return True

    def runlog(self) -> RunLog:
        """Everything written so far as a RunLog (flushes first; a file is read back)."""
        if not self.closed:
            if self.path is not None:
                self.close()
            else:
                self.flush()
        if self.path is not None and self._writer is not None:
            target = self.path if self._tmp is None or not self._tmp.exists() else self._tmp
            try:
                with arrow_source(target) as src, pq.ParquetFile(src) as pf:
                    table = pf.read(use_threads=False)  # on this thread (see parquet_read)
            except (OSError, pa.ArrowInvalid):
                table = WRITER_SCHEMA.empty_table()  # nothing readable survived the error
            return RunLog(table.replace_schema_metadata(None), self.meta)
        if not self._tables:
            return RunLog(WRITER_SCHEMA.empty_table(), self.meta)
        table = pa.concat_tables(self._tables).replace_schema_metadata(None)
        return RunLog(table, self.meta)
