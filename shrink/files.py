"""The one reader of the JSON and TOML files the stages hand each other.

Every JSON or TOML file shrink reads (LoadCurve, prediction, calibration,
testbed state, machine spec, docroot manifest, and the JSON kept in a Parquet
file's metadata) goes through :func:`read_json` / :func:`read_toml` /
:func:`parse_json`, and is checked against its schema: a pydantic model
(:mod:`shrink.schemas`), or, for a format whose dataclass is a
:class:`FileFormat` (share, load curve, prediction, validation, MAT, machine spec,
mapping, testbed state and its enforcers, calibration, docroot manifest), the dataclass
itself through its TypeAdapter (:func:`adapt`).
A bad file gives one line naming the file and what is wrong, never a traceback:

- the file is missing, a directory, unreadable or larger than ``MAX_BYTES``;
- a byte that is not UTF-8 (its offset is named);
- a syntax error (its line), a number of more than 4,300 digits, nesting deeper
  than the parser's recursion limit;
- a field that is missing, of the wrong type, or outside its bounds: named by
  its path in the document, e.g. ``levels[3].reps[0].overall.n``.

Bounds on every size (sockets, cores, list lengths, string lengths) live in the
models, so a hostile number cannot make a later stage allocate gigabytes.
Keys a reader does not know are allowed (a newer writer may add some); readers
get back the validated document as plain Python values, or the format's type.
"""

from __future__ import annotations

import functools
import json
import math
import os
import re
import stat
import sys
import tomllib
from pathlib import Path
from typing import Any, BinaryIO, ClassVar, Self, TypeVar

from pydantic import BaseModel, TypeAdapter, ValidationError, computed_field, model_validator

from shrink.atomic import is_plain_target
from shrink.errors import ParameterError, TraceFormatError
from shrink.jsonout import plain
from shrink.text_encoding import HINTS, utf16_without_bom, utf32

__all__ = [
    "MAX_BYTES",
    "check_output",
    "lock_of",
    "nosymfollow_link",
    "os_why",
    "parse_json",
    "read_at_most",
    "read_json",
    "read_text",
    "read_toml",
    "regular_file",
    "seekable_file",
    "validate",
]

# The largest summary shrink writes is a LoadCurve of a few MB (quantile grids per
# class, level and repetition); anything past this is not one of ours. The cap also
# bounds memory: 16 MiB of the smallest JSON values ("[],") is about 300 MiB of objects.
MAX_BYTES = 16 * 1024 * 1024
# Levels a TOML document may nest (a recipe's deepest is 3: versions = { x = [...] }).
# Dotted keys (a.b.c... = 1) nest without the parser recursing, so a 25 KB file held a
# table 3,000 deep, which printing it in an error message then could not.
MAX_NESTING = 64

M = TypeVar("M", bound=BaseModel)
T = TypeVar("T")


def _not_a_dir(path: Path) -> str:
    """What ``path``, which exists and is not a folder, is: "a file", "a symlink to X, a
    file", "a pipe", ..."""
    kinds = ((stat.S_ISFIFO, "a pipe"), (stat.S_ISSOCK, "a socket"), (stat.S_ISCHR, "a device"))
    mode = path.stat().st_mode
    kind = next((name for test, name in kinds if test(mode)), None)
    kind = kind or ("a device" if stat.S_ISBLK(mode) else "a file")
    return f"a symlink to {os.readlink(path)}, {kind}" if path.is_symlink() else kind


# statvfs's f_flag bit for a mount with nosymfollow (Linux 5.10; not in every os module)
_ST_NOSYMFOLLOW = 0x2000


def nosymfollow_link(path: str | Path) -> str | None:
    """Why ``path`` cannot be followed where the kernel said ELOOP: a symlink on it lies
    on a file system mounted ``nosymfollow``, which follows none (the kernel's "Too many
    levels of symbolic links", of one link); None if none does."""
    here = Path(os.path.abspath(path))
    for at in [*reversed(here.parents), here]:
        try:
            if not at.is_symlink() or not os.statvfs(at.parent).f_flag & _ST_NOSYMFOLLOW:
                continue
            real = os.path.realpath(path)
        except OSError:
            return None
        return (
            f"{at} is a symlink on a file system mounted nosymfollow, which follows no "
            f"symlink; give the path it leads to ({real})"
        )
    return None


def os_why(exc: OSError, path: str | Path) -> str:
    """An OSError's words for a path read or written: its strerror, or what a
    ``nosymfollow`` mount refused (:func:`nosymfollow_link`)."""
    import errno

    if exc.errno == errno.ELOOP and (why := nosymfollow_link(path)):
        return why
    return exc.strerror or str(exc)


def _read_only_fs(path: Path) -> bool:
    """Whether ``path`` lies on a file system mounted read-only (ro)."""
    try:
        return bool(os.statvfs(path).f_flag & os.ST_RDONLY)
    except OSError:
        return False


def check_output(path: str | Path, *, kind: str = "file", what: str = "output") -> Path:
    """Fail now, in one line, if ``path`` cannot be written as a ``kind`` ("file" or "dir").

    Commands call this before measuring, so a run is never lost to an output path
    that is a directory, sits under a file, or lies in a folder this user may not
    write. Its parent folder must exist (a typo in a path must not create a tree of
    folders); a ``kind="dir"`` output itself may be new.
    """
    if str(path) == "-":
        # "-" is standard output to most tools: a file named "-" was written instead
        raise ParameterError(f"{what} '-': shrink writes files, not standard output; name a file")
    path = Path(path)
    if why := nosymfollow_link(path):  # (said the kernel's ELOOP, with no verb)
        raise ParameterError(f"{what} {path}: cannot be written there: {why}")
    if kind == "file" and path.is_dir():
        raise ParameterError(f"{what} {path} is a directory; name a file")
    if kind == "dir" and path.exists() and not path.is_dir():
        raise ParameterError(f"{what} {path} is {_not_a_dir(path)}; name a directory")
    if kind == "dir" and path.is_symlink() and not path.exists():
        # mkdir cannot follow it: the write failed later, after other outputs were written.
        raise ParameterError(
            f"{what} {path} is a symlink to {os.readlink(path)}, which does not exist; "
            "create it or name another directory"
        )
    if not is_plain_target(path):
        # Written by rename, it would become a regular file: as root, -o /dev/null
        # replaced the system's /dev/null.
        raise ParameterError(
            f"{what} {path} is a device, pipe, socket or descriptor; name a regular file"
        )
    if (fs := _kernel_fs(path)) is not None:
        # root may "write" there as far as access() says; the write fails once measured
        raise ParameterError(f"{what} {path} is on {fs} (the kernel's, not storage): name another")
    _walked_as_written(path if kind == "dir" and path.exists() else path.parent, path, what)
    _not_locked(path, kind, what)
    if path.exists():
        if not os.access(path, os.W_OK | (os.X_OK if kind == "dir" else 0)):
            if _read_only_fs(path):
                raise ParameterError(f"{what} {path} is on a read-only file system")
            raise ParameterError(f"{what} {path} is not writable")
        return path
    # Asked by the path as given (relative to the working folder, as the kernel takes
    # it), said from /: in a working folder whose path passes PATH_MAX, -o c.json was
    # refused as "<its 4,100 bytes>: File name too long", a path the user never gave.
    parent, near = path.absolute().parent, path.parent
    if not near.exists():
        raise ParameterError(f"{what} {path}: its folder {parent} does not exist; create it first")
    if not near.is_dir():
        raise ParameterError(f"{what} {path}: {parent} is not a directory")
    if not os.access(near, os.W_OK | os.X_OK):
        why = "is on a read-only file system" if _read_only_fs(near) else "is not writable"
        raise ParameterError(f"{what} {path}: cannot create it, {parent} {why}")
    return path


# FS_IOC_GETFLAGS (lsattr): its FS_IMMUTABLE_FL and FS_APPEND_FL bits
_GETFLAGS, _LOCKS = 0x80086601, ((0x10, "immutable (chattr +i)"), (0x20, "append-only (chattr +a)"))


def lock_of(path: Path) -> str | None:
    """What chattr flag, if any, forbids renaming over or within ``path`` (a file or a
    folder), even for root: "immutable (chattr +i)" or "append-only (chattr +a)"."""
    import fcntl

    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        flags = int.from_bytes(fcntl.ioctl(fd, _GETFLAGS, bytes(8))[:4], sys.byteorder)
    except OSError:  # (a file system without these flags)
        return None
    finally:
        os.close(fd)
    return next((said for bit, said in _LOCKS if flags & bit), None)


def _not_locked(path: Path, kind: str, what: str) -> None:
    """Refuse ``path`` now where a chattr flag will refuse its write: every output is put
    in place by rename from a temporary file beside it, which an immutable or append-only
    folder or file forbids. A sweep into an append-only folder ran all its levels, then
    "cannot write (Operation not permitted, EPERM)", and left its temporary files, which
    no one may remove there."""
    folder = path if kind == "dir" and path.is_dir() else path.parent
    if path.exists() and folder != path and (lock := lock_of(path)):
        raise ParameterError(
            f"{what} {path} is {lock}: it cannot be replaced; "
            f"chattr -{lock[-2]} {path}, or name another"
        )
    if lock := lock_of(folder):
        raise ParameterError(
            f"{what} {path}: its folder {folder.absolute()} is {lock}: no file can be renamed "
            f"into place or removed there; chattr -{lock[-2]} {folder}, or name another folder"
        )


def _walked_as_written(folder: Path, path: Path, what: str) -> None:
    """Refuse ``path`` now where the write will refuse its ``folder`` (walked one name at
    a time from /, :func:`shrink.atomic.pass_dir`): through a symlink another user owns,
    -o passed this check, the run ran, and its file was "cannot write (a symlink owned by
    UID N, not followed)" after it. Other errors are said by the checks that follow."""
    import errno

    from shrink.atomic import pass_dir

    try:
        os.close(pass_dir(folder))
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            why = f"{exc.strerror}: {exc.filename}" if exc.filename else exc.strerror
            raise ParameterError(f"{what} {path}: cannot be written there ({why})") from None


_KERNEL_FS = frozenset(
    [
        "proc",
        "sysfs",
        "cgroup",
        "cgroup2",
        "debugfs",
        "tracefs",
        "securityfs",
        "configfs",
        "bpf",
        "pstore",
        "efivarfs",
        "fusectl",
        "devpts",
        "mqueue",
        "binfmt_misc",
        "autofs",
    ]
)


def _kernel_fs(path: str | Path) -> str | None:
    """The type of the kernel's file system (``proc``, ``sysfs``, ...) that ``path``, or
    the nearest folder above it that exists, lies on; None on any other (or unknown)."""
    near = Path(path)  # the nearest that exists, asked as given (see check_output)
    while not os.path.lexists(near) and near != near.parent:
        near = near.parent
    p = Path(os.path.realpath(near))
    best, fs = "", None
    try:
        with open("/proc/self/mountinfo", encoding="utf-8", errors="replace") as f:
            for line in f:
                fields, _, rest = line.partition(" - ")
                point = re.sub(r"\\([0-7]{3})", lambda m: chr(int(m[1], 8)), fields.split()[4])
                inside = str(p) == point or str(p).startswith(point.rstrip("/") + "/")
                if inside and len(point) >= len(best):
                    best, fs = point, rest.split(" ", 1)[0]
    except (OSError, IndexError):
        return None
    return fs if fs in _KERNEL_FS else None


def regular_file(path: str | Path, *, kind: str, reason: str) -> Path:
    """``path`` if it names a regular file; a one-line :class:`TraceFormatError` naming it
    if not: ``is a directory, not KIND``, or ``not a regular file ...: REASON``.
    ``stat`` neither opens nor blocks (a FIFO's ``open`` waits for a writer)."""
    path = Path(path)
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        raise TraceFormatError("no such file", path=path) from None
    except OSError as exc:
        raise TraceFormatError(f"cannot read ({os_why(exc, path)})", path=path) from None
    if stat.S_ISDIR(mode):
        raise TraceFormatError(f"is a directory, not {kind}", path=path)
    if not stat.S_ISREG(mode):
        raise TraceFormatError(
            f"not a regular file (a pipe, socket or device): {reason}, so save it to a file first",
            path=path,
        )
    return path


def seekable_file(path: str | Path, *, what: str) -> Path:
    """``path`` if it names a regular file: a Parquet file is read by seeking (pyarrow
    called a FIFO or /dev/null "no such file")."""
    return regular_file(
        path, kind=f"a Parquet {what}", reason=f"a Parquet {what} is read by seeking"
    )


def read_at_most(f: BinaryIO, most: int) -> bytes:
    """Up to ``most`` bytes of the open file ``f``, with no buffer much larger than what
    it holds. ``f.read(most)`` made a buffer of ``most`` bytes first (16 MiB for every
    JSON or TOML file read, 72 KB or not); glibc then took each such block from its
    heap, not a mapping of its own (its threshold rises to a freed block's size), and
    the heap, cut up between them, held the bench_fuzz LoadCurve run's RSS at 441 MiB."""
    size = os.fstat(f.fileno()).st_size  # 0 for a pipe: read on in steps
    chunks, got = [], 0
    while got < most:
        step = min(most - got, max(size + 1 - got, 0) or 1 << 16)
        chunk = f.read(step)
        if not chunk:
            break
        chunks.append(chunk)
        got += len(chunk)
    return b"".join(chunks)


def read_text(path: str | Path, *, what: str = "file", max_bytes: int = MAX_BYTES) -> str:
    """The file's text, decoded as UTF-8; a one-line :class:`TraceFormatError` otherwise."""
    path = Path(path)
    try:
        if path.is_dir():
            raise TraceFormatError(f"is a directory, not a {what}", path=path)
        # A FIFO without a writer blocked open() for ever; opened non-blocking it reads
        # as empty, and one with a writer (bash's <(...)) is still read to its end.
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
        os.set_blocking(fd, True)
        with os.fdopen(fd, "rb") as f:
            data = read_at_most(f, max_bytes + 1)
    except FileNotFoundError:
        raise TraceFormatError(f"no such {what}", path=path) from None
    except OSError as exc:
        raise TraceFormatError(f"cannot read the {what}: {os_why(exc, path)}", path=path) from None
    if len(data) > max_bytes:
        raise TraceFormatError(f"larger than {max_bytes >> 20} MiB: not a {what}", path=path)
    return decode(data, path=path, what=what)


_UTF8_BOM = b"\xef\xbb\xbf"


def decode(data: bytes, *, path: str | Path | None, what: str) -> str:
    """UTF-8 text of ``data``, without a UTF-8 byte order mark at its start (editors on
    Windows save one; the JSON and TOML parsers refused it at line 1); a bad byte is
    named by its offset."""
    bom = 0
    while data.startswith(_UTF8_BOM, bom):  # two, from a tool that added one to a file with one
        bom += len(_UTF8_BOM)
    if (wide := utf32(data[bom:]) or utf16_without_bom(data[bom:])) is not None:
        raise TraceFormatError(f"not a {what}: {wide}", path=path)
    try:
        return data[bom:].decode("utf-8")
    except UnicodeDecodeError as exc:
        hint = next((h for magic, h in HINTS if data.startswith(magic)), "")
        raise TraceFormatError(
            f"not UTF-8 text, so not a {what}{hint}", path=path, offset=bom + exc.start
        ) from None


def _long_number(
    exc: ValueError, text: str, what: str, source: str | Path | None
) -> TraceFormatError:
    """The error for a number longer than Python converts (``int`` raised ValueError:
    "Exceeds the limit (4300 digits) ... use sys.set_int_max_str_digits()", advice for
    a programmer), naming the line that holds it."""
    most = sys.get_int_max_str_digits()
    m = re.search(rf"\d(?:_?\d){{{most},}}", text)
    if m is None:  # another ValueError: its own words
        return TraceFormatError(f"not a {what}: {_first_line(exc)}", path=source)
    line = text.count("\n", 0, m.start()) + 1
    return TraceFormatError(
        f"not a {what}: a number of more than {most:,} digits", path=source, line=line
    )


def parse_json(
    text: str | bytes,
    model: type[M] | None = None,
    *,
    source: str | Path | None = None,
    what: str = "JSON file",
) -> Any:
    """Parse JSON ``text`` and validate it against ``model``; the plain document back."""
    if isinstance(text, bytes):
        text = decode(text, path=source, what=what)
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as exc:
        raise TraceFormatError(f"not JSON: {exc.msg}", path=source, line=exc.lineno) from None
    except ValueError as exc:  # an integer of more than 4,300 digits
        raise _long_number(exc, text, what, source) from None
    except RecursionError:
        raise TraceFormatError(f"not a {what}: nested too deeply", path=source) from None
    return doc if model is None else validate(doc, model, source=source, what=what)


def read_json(path: str | Path, model: type[M] | None = None, *, what: str = "JSON file") -> Any:
    """Read, parse and validate a JSON file (see the module docstring)."""
    return parse_json(read_text(path, what=what), model, source=path, what=what)


def read_toml(path: str | Path, model: type[M] | None = None, *, what: str = "TOML file") -> Any:
    """Read, parse and validate a TOML file (see the module docstring)."""
    text = read_text(path, what=what)
    try:
        doc = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise TraceFormatError(f"not TOML: {_first_line(exc)}", path=path) from None
    except RecursionError as exc:
        raise TraceFormatError(f"not a {what}: {_first_line(exc)}", path=path) from None
    except ValueError as exc:  # an integer of more than 4,300 digits
        raise _long_number(exc, text, what, path) from None
    if _nested_past(doc, MAX_NESTING):
        raise TraceFormatError(
            f"not a {what}: nested more than {MAX_NESTING} levels deep", path=path
        )
    return doc if model is None else validate(doc, model, source=path, what=what)


def _nested_past(doc: Any, most: int) -> bool:
    """Whether tables and arrays nest in ``doc`` more than ``most`` levels deep (walked
    without recursion)."""
    todo = [(doc, 1)]
    while todo:
        value, depth = todo.pop()
        if isinstance(value, (dict, list)) and depth > most:
            return True
        if isinstance(value, dict):
            todo.extend((v, depth + 1) for v in value.values())
        elif isinstance(value, list):
            todo.extend((v, depth + 1) for v in value)
    return False


def validate(
    doc: Any, model: type[M], *, source: str | Path | None = None, what: str = "file"
) -> dict[str, Any]:
    """``doc`` checked against ``model``: the document (with values coerced to their types)."""
    try:
        obj = model.model_validate(doc)
    except ValidationError as exc:
        raise TraceFormatError(_describe(exc, what), path=source) from None
    except RecursionError:
        raise TraceFormatError(f"not a {what}: nested too deeply", path=source) from None
    return obj.model_dump(exclude_unset=True, by_alias=True)


def adapt(
    adapter: TypeAdapter[T],
    doc: Any,
    *,
    what: str,
    at: str | None = None,
    source: str | Path | None = None,
) -> T:
    """``doc`` read as the type of ``adapter`` (a typed file format); one line if it is not.

    ``at``: where ``doc`` is in its file (``share``), named in the error before the field.
    """
    try:
        return adapter.validate_python(doc)
    except ValidationError as exc:
        raise TraceFormatError(_describe(exc, what, at), path=source) from None
    except RecursionError:
        raise TraceFormatError(f"not a {what}: nested too deeply", path=source) from None


def is_none(value: Any) -> bool:
    """A field's ``exclude_if``: a None is not written (a reader's default fills it)."""
    return value is None


def is_empty(value: Any) -> bool:
    """A field's ``exclude_if``: an empty value is not written."""
    return not value


class FileFormat:
    """A dataclass that is a file format: its TypeAdapter is the schema, reader and writer.

    ``to_dict`` and ``from_dict`` are the adapter's, so the dataclass's fields (their
    types, bounds and defaults) are the one definition of the format. ``WHAT`` names it
    in errors.
    """

    WHAT: ClassVar[str] = "file"

    @classmethod
    def file_format(cls) -> TypeAdapter[Self]:
        return _adapter(cls)

    def to_dict(self) -> dict[str, Any]:
        """The file form: JSON values, NaN as None."""
        return plain(_adapter(type(self)), self)

    @classmethod
    def from_dict(cls, d: Any, *, source: str | Path | None = None) -> Self:
        """Read the file form, or an older file's (the type's defaults fill in)."""
        return adapt(_adapter(cls), d, what=cls.WHAT, source=source)


class VersionedFile(FileFormat):
    """A file format that names itself: ``schema`` (:attr:`SCHEMA`) is written and checked."""

    SCHEMA: ClassVar[str] = ""

    @computed_field(alias="schema")  # type: ignore[prop-decorator]
    @property
    def schema_id(self) -> str:
        """The format's name and version, written as ``schema``."""
        return self.SCHEMA

    @model_validator(mode="before")
    @classmethod
    def _named(cls, d: Any) -> Any:
        if isinstance(d, dict) and d.get("schema") != cls.SCHEMA:
            raise ValueError(f"schema == {d.get('schema')!r}, expected {cls.SCHEMA!r}")
        return d


@functools.cache
def _adapter(cls: type) -> TypeAdapter[Any]:
    return TypeAdapter(cls)


def _describe(exc: ValidationError, what: str, at: str | None = None) -> str:
    errs = exc.errors(include_url=False)
    e = errs[0]
    loc = _loc(((at,) if at else ()) + tuple(e.get("loc", ())))
    # A validator's own ValueError is already a sentence; pydantic prefixes it.
    msg = str(e.get("msg", "invalid")).rstrip(".").removeprefix("Value error, ")
    if e.get("type") == "missing":
        text = f"{what} lacks {loc or 'a field'}"
    else:
        text = f"{loc or 'document'}: {msg}{_shown(e.get('input'))}"
    more = len(errs) - 1
    return text + (f" (and {more} more problem{'s' * (more > 1)})" if more else "")


def _loc(loc: tuple[Any, ...]) -> str:
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += ("." if out else "") + str(part)
    return out


def _shown(value: Any) -> str:
    if isinstance(value, (dict, list)):
        return ""
    if isinstance(value, float) and not math.isfinite(value):
        return f" (got {value})"
    text = repr(value)
    if len(text) > 40:
        text = text[:37] + "..."
    return f" (got {text})"


def _first_line(exc: BaseException) -> str:
    lines = str(exc).strip().splitlines()
    return lines[0] if lines else type(exc).__name__
