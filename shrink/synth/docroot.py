"""The document root a synthetic workload is served from, and its manifest.

Layout (fixed by the project's cross-part conventions)::

    DIR/manifest.json            {"schema": "shrink.docroot/1", "workload", "static",
                                  "dynamic", "params", ...}
    DIR/static/...               every static file at its URL path
    DIR/static/file1k.bin        the tcp workload's file (1024 bytes), always written
    DIR/app/_work.php            the work of a dynamic page (see its header comment)
    DIR/app/<page>.php           index, search, catalog, product, fileCatalog, file

File contents are a deterministic function of the URL path and the size (a
64 KiB pseudo-random block, seeded by the path, repeated), so a re-run finds
identical files and skips them: small files are compared whole, files over
1 MiB by size and their first and last 64 KiB. New content is written to a
temporary name and renamed, so a server reading the tree never sees half a file.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
import stat
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path, PurePosixPath
from typing import Annotated, Any, BinaryIO

import numpy as np
from pydantic import Field, model_serializer

from shrink import files
from shrink.atomic import atomic_file, write_bytes
from shrink.errors import ParameterError, ShrinkError
from shrink.jsonout import dumps
from shrink.schemas import MAX_LIST, Count, Text
from shrink.synth.support import PAGES, SupportSite, expected_dynamic_fraction, images_per_page
from shrink.synth.tcp import TCP_BYTES, TCP_PATH
from shrink.wire import served_path

__all__ = [
    "MANIFEST_SCHEMA",
    "DocrootReport",
    "DynamicPage",
    "Manifest",
    "StaticFile",
    "docroot_path",
    "missing_paths",
    "read_manifest",
    "recorded_plain",
    "static_problem",
    "support_docroot",
    "tcp_docroot",
    "write_docroot",
]

MANIFEST_SCHEMA = "shrink.docroot/1"
_BLOCK = 65_536
_CHUNK_BLOCKS = 16  # write 1 MiB at a time
_WHOLE_COMPARE = 1 << 20


@dataclass(frozen=True)
class StaticFile(files.FileFormat):
    """A static file at URL ``path``; ``nominal_bytes`` is its size before a cap
    (written only where the cap made it smaller)."""

    path: Text
    bytes: Count
    nominal_bytes: Count | None = None

    WHAT = "static file"

    @model_serializer(mode="wrap")
    def _written(self, handler: Any) -> dict[str, Any]:
        d: dict[str, Any] = handler(self)
        if self.nominal_bytes is None or self.nominal_bytes == self.bytes:
            del d["nominal_bytes"]
        return d


@dataclass(frozen=True)
class DynamicPage(files.FileFormat):
    """A dynamic URL and what the PHP page does for it (bytes out, work units, KiB touched)."""

    path: Text
    bytes: Count
    work: Count
    mem_kib: Count

    WHAT = "dynamic page"


def _php() -> dict[str, Any]:
    return {
        "pages": [f"/app/{p}.php" for p in PAGES],
        "url": "/app/<page>.php?bytes=B&work=W&mem=M&id=I",
        "work_unit_us": 1.0,
    }


@dataclass
class Manifest(files.VersionedFile):
    """``manifest.json``: what a document root holds (``shrink.docroot/1``).

    ``php`` says how the PHP pages are called; ``params``, what the site was built from.
    """

    workload: Text
    static: Annotated[list[StaticFile], Field(max_length=10 * MAX_LIST)]
    dynamic: Annotated[list[DynamicPage], Field(max_length=10 * MAX_LIST)]
    php: dict[Text, Any] = field(default_factory=_php)
    params: dict[Text, Any] = field(default_factory=dict)

    SCHEMA = MANIFEST_SCHEMA
    WHAT = "docroot manifest"


@dataclass(frozen=True)
class DocrootReport:
    """What :func:`write_docroot` did."""

    root: Path
    manifest: Path
    static_files: int
    written: int
    unchanged: int
    bytes_on_disk: int
    capped: int

    def to_dict(self) -> dict[str, Any]:
        return {
            "root": str(self.root),
            "manifest": str(self.manifest),
            "static_files": self.static_files,
            "written": self.written,
            "unchanged": self.unchanged,
            "bytes_on_disk": self.bytes_on_disk,
            "capped": self.capped,
        }


def _block(path: str) -> bytes:
    seed = int.from_bytes(hashlib.sha256(path.encode()).digest()[:8], "little")
    return np.random.default_rng(seed).bytes(_BLOCK)


def _local(root: Path, url_path: str) -> Path:
    rel = served_path(url_path)
    parts = Path(rel).parts
    if not rel or ".." in parts or "\x00" in rel:
        raise ParameterError(f"docroot path == {url_path!r}, must be a plain absolute URL path.")
    return root.joinpath(*parts)


# The files a docroot holds of its own, whatever a trace's paths: its PHP pages and
# its manifest. A static file of a recorded trace at one of them would be replaced.
_NAME_MAX = 255  # bytes in a file name, on Linux's file systems
_OWN_FILES = frozenset({"manifest.json", "app/_work.php", *(f"app/{p}.php" for p in PAGES)})


def docroot_path(url_path: str) -> str:
    """The file ``url_path`` is served from, as a URL path (``//a/./b`` is ``/a/b``);
    ParameterError if it is none."""
    return "/" + "/".join(_local(Path(), url_path).parts)


def recorded_plain(paths: Sequence[str], status: Sequence[int]) -> np.ndarray:
    """Which requests of a recorded trace a docroot of one file a path answers as recorded:
    status 200 for a plain file path (no query, no escapes, not a folder, not one of
    :func:`static_problem`'s, none the testbed refuses or serves from elsewhere). A
    folder is any path above another (``/a`` beside ``/a/b/c`` or ``/a/./b``): it cannot
    be a file too."""
    from shrink.testbed.config import HIDDEN_PATH_RE  # the testbed's, loaded for a demo

    # What the testbed answers otherwise than from a docroot file: a hidden segment (403
    # on both stacks), lighttpd's denied "~" and ".inc" (403), and the health check's
    # own folder (/__shrink/, served from another folder).
    refused = re.compile(HIDDEN_PATH_RE + r"|~$|\.inc$|^/__shrink/")
    files: dict[str, str | None] = {}
    for p in set(paths):
        plain = p.startswith("/") and not p.endswith("/") and "?" not in p and "%" not in p
        f = docroot_path(p) if plain and static_problem(p) is None else None
        files[p] = None if f is None or refused.search(f) else f
    folders = {str(d) for f in files.values() if f for d in PurePosixPath(f).parents}
    keep = {p for p, f in files.items() if f is not None and f not in folders}
    return np.array([st == 200 and p in keep for p, st in zip(paths, status, strict=True)])


def _check_layout(paths: Iterable[str]) -> None:
    """Refuse, before anything is written, static files the file system cannot hold
    together: two paths at one file, or a file at a folder another's path goes through."""
    by_file: dict[str, str] = {}
    for p in paths:
        f = docroot_path(p)
        if f in by_file:
            raise ParameterError(f"static file paths {by_file[f]!r} and {p!r} name one file, {f}.")
        by_file[f] = p
    for f, p in by_file.items():
        for d in PurePosixPath(f).parents:
            if str(d) in by_file:
                raise ParameterError(
                    f"static file path {by_file[str(d)]!r} is a folder of {p!r}: a file "
                    "cannot be a folder too."
                )


def _check_room(root: Path, files: Iterable[StaticFile]) -> None:
    """Refuse, before anything is written, static files their file system has no room
    for: a recorded trace's sizes are its own (a log line may say 10^12 bytes), and
    written until the disk was full they took the free space of every other user (and
    root's reserve) before the write failed. Files there at their size count as kept."""
    base = root
    while not base.exists() and base != base.parent:
        base = base.parent
    fs = os.statvfs(base)
    block = fs.f_frsize or 4096
    need = inodes = 0
    largest: StaticFile | None = None
    folders: set[Path] = set()
    for f in files:
        target = _local(root, f.path)
        try:
            st = os.lstat(target)
            if stat.S_ISREG(st.st_mode) and st.st_size == f.bytes:
                continue
        except OSError:
            inodes += 1
            folders.update(d for d in target.parents if d not in folders and not d.exists())
        need += -(-f.bytes // block) * block
        largest = f if largest is None or f.bytes > largest.bytes else largest
    free, free_inodes = fs.f_bavail * block, fs.f_favail
    inodes += len(folders)
    if largest is not None and (need > free or (fs.f_files and inodes > free_inodes)):
        raise ShrinkError(
            f"{root}: the docroot needs {need:,} bytes and {inodes:,} files more (the "
            f"largest, {largest.path}, {largest.bytes:,} bytes), but its file system has "
            f"{free:,} bytes and {free_inodes:,} files free: nothing written"
        )


_MAX_MANIFEST = 1 << 30


def _written_here(root: Path) -> set[Path] | None:
    """The files the manifest of ``root`` says shrink wrote there (None: no manifest of
    shrink's; one through a symlink is none)."""
    target = root / "manifest.json"
    try:  # opened as _open_regular opens: a FIFO held open by its writer hung read_text
        fd = os.open(target, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
        with os.fdopen(fd, "rb") as fh:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                return None
            data = fh.read(_MAX_MANIFEST)  # up to a million files listed
        doc = files.parse_json(data, source=target, what=Manifest.WHAT)
        old = Manifest.from_dict(doc, source=target)
    except (OSError, ShrinkError):
        return None
    out = {target, *(root / "app" / name for name in _php_sources())}
    for f in old.static:
        with contextlib.suppress(ParameterError):
            out.add(_local(root, f.path))
    return out


def _check_foreign(root: Path, targets: Sequence[tuple[Path, str | None]]) -> None:
    """Refuse to replace a file that shrink did not write: a ``--docroot`` naming a
    folder of the user's own (a site, with its own ``app/index.php``) had its files
    replaced without a word. A file there is shrink's if the docroot's manifest lists
    it, or if it holds, at its size, the bytes shrink writes at its URL path (a docroot
    written for another workload or site before); nothing is written when one is
    neither."""
    ours: set[Path] | None = None
    for t, url_path in targets:
        try:
            size = os.lstat(t).st_size
        except FileNotFoundError:
            continue
        if url_path is not None and _same(t, size, _block(url_path)):
            continue
        if ours is None:
            ours = _written_here(root) or set()
        if t not in ours:
            raise ShrinkError(
                f"{t}: there already, and not a file shrink wrote (no manifest.json of "
                f"shrink's in {root} lists it): not replaced, nothing written; give "
                "--docroot a new or empty folder"
            )


def static_problem(url_path: str) -> str | None:
    """Why ``url_path`` cannot be a static file of a docroot (its bytes sent as they are),
    or None. Both stacks run a ``.php`` file as PHP, as the servers' user: a static file
    there (a recorded trace's ``/x.php``, its bytes pseudo-random) would be parsed and
    run, not sent. A path at one of the docroot's own files would be replaced by it."""
    try:
        rel = "/".join(_local(Path(), url_path).parts)
    except ParameterError:
        return "not a plain absolute URL path"
    if any(len(os.fsencode(part)) > _NAME_MAX for part in rel.split("/")):
        return f"a name in it is over the {_NAME_MAX} bytes a file name may hold"
    if rel.endswith(".php"):
        return "the servers run a .php file as PHP, not send its bytes"
    if rel in _OWN_FILES:
        return "the docroot's own file (its PHP pages and manifest.json) is there"
    return None


def _same(target: Path, size: int, block: bytes) -> bool:
    fh = _open_regular(target, size)
    if fh is None:
        return False
    with fh:
        if size <= _WHOLE_COMPARE:
            return fh.read(size + 1) == _content(block, 0, size)
        if fh.read(_BLOCK) != block:
            return False
        tail = size - _BLOCK
        fh.seek(tail)
        return fh.read(_BLOCK + 1) == _content(block, tail, size)


def _open_regular(target: Path, size: int) -> BinaryIO | None:
    """``target`` open for reading if it is a regular file of ``size`` bytes, opened
    without following a symlink or blocking; else None. The rerun compares what is
    there before rewriting it: a link or FIFO planted in the docroot must not have
    root read another file, or hang on one no one writes."""
    try:
        fd = os.open(target, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return None
    fh = os.fdopen(fd, "rb")
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode) or st.st_size != size:
        fh.close()
        return None
    return fh


def _content(block: bytes, start: int, stop: int) -> bytes:
    """Bytes [start, stop) of the block repeated forever."""
    first = (start // _BLOCK) * _BLOCK
    reps = -(-(stop - first) // _BLOCK)
    return (block * reps)[start - first : stop - first]


def _write_file(target: Path, size: int, block: bytes) -> None:
    chunk = block * _CHUNK_BLOCKS
    with atomic_file(target, "wb", sync=False) as fh:
        left = size
        while left > 0:
            piece = chunk if left >= len(chunk) else chunk[:left]
            fh.write(piece)
            left -= len(piece)


def _write_text(target: Path, text: str) -> bool:
    data = text.encode()
    if _holds(target, data):
        return False
    write_bytes(target, data, sync=False)
    return True


def _holds(target: Path, data: bytes) -> bool:
    """Whether ``target`` is a regular file holding ``data`` (:func:`_open_regular`)."""
    fh = _open_regular(target, len(data))
    if fh is None:
        return False
    with fh:
        return fh.read(len(data) + 1) == data


def _php_sources() -> dict[str, str]:
    php = resources.files("shrink.synth").joinpath("php")
    names = ["_work.php", *(f"{p}.php" for p in PAGES)]
    return {name: php.joinpath(name).read_text(encoding="utf-8") for name in names}


def write_docroot(
    root: str | Path,
    *,
    workload: str,
    static: Sequence[StaticFile],
    dynamic: Sequence[DynamicPage],
    params: Mapping[str, Any],
) -> DocrootReport:
    """Write the static files, the PHP pages and ``manifest.json`` under ``root``.

    ``/static/file1k.bin`` and the PHP pages are always written, so one
    document root serves both workloads; files already there with the same
    content are left alone.
    """
    root = Path(root)
    if root.exists() and not root.is_dir():
        raise ShrinkError(f"{root}: docroot exists and is not a directory")
    for f in static:
        why = static_problem(f.path)
        if why is not None:
            raise ParameterError(f"static file path == {f.path!r}: {why}.")
    files = {f.path: f for f in static}
    files.setdefault(TCP_PATH, StaticFile(TCP_PATH, TCP_BYTES))
    _check_layout(files)
    _check_room(root, files.values())
    # A server user reads it: under root's umask 077 (or 027) every file was 0600 and
    # every folder 0700, and each request of the trace a 403.
    old_umask = os.umask(0o022)
    try:
        return _write_tree(root, files, workload, dynamic, params)
    finally:
        os.umask(old_umask)


def _write_tree(
    root: Path,
    files: dict[str, StaticFile],
    workload: str,
    dynamic: Sequence[DynamicPage],
    params: Mapping[str, Any],
) -> DocrootReport:
    written = unchanged = on_disk = capped = 0
    try:
        todo = []
        for path in sorted(files):
            f = files[path]
            target = _local(root, path)
            if os.path.lexists(target) and _same(target, f.bytes, _block(path)):
                unchanged += 1
            else:
                todo.append((target, f.bytes, path))  # not its block: 64 KiB a file
            on_disk += f.bytes
            capped += int(f.nominal_bytes is not None and f.nominal_bytes != f.bytes)
        pages = {root / "app" / name: text.encode() for name, text in _php_sources().items()}
        manifest = Manifest(
            workload, [files[p] for p in sorted(files)], list(dynamic), params=dict(params)
        )
        target = root / "manifest.json"
        text = dumps(manifest.to_dict(), indent=1, sort_keys=True) + "\n"
        pages = {p: data for p, data in pages.items() if not _holds(p, data)}
        _check_foreign(root, [(t, u) for t, _, u in todo] + [(p, None) for p in [*pages, target]])
        for t, size, url_path in todo:
            _write_file(t, size, _block(url_path))
        for p, data in pages.items():
            write_bytes(p, data, sync=False)
        written = len(todo) + len(pages)
        _write_text(target, text)
    except OSError as exc:
        raise ShrinkError(f"{root}: cannot write the docroot ({exc})") from exc
    return DocrootReport(root, target, len(files), written, unchanged, on_disk, capped)


def support_docroot(root: str | Path, site: SupportSite) -> DocrootReport:
    """The document root of a Support-like site (images, downloads, rf stand-ins, PHP)."""
    p = site.params
    params = {
        **p.to_dict(),
        "users": site.users,
        "download_dirs": site.n_dirs,
        "images_per_page": dict(zip(PAGES, images_per_page(p).tolist(), strict=True)),
        "expected_dynamic_fraction": expected_dynamic_fraction(p),
        "capped": (
            "download files above max_download_bytes are written, and recorded in the "
            "trace, at max_download_bytes; nominal_bytes gives the published size"
            if p.max_download_bytes is not None
            else None
        ),
    }
    static = [StaticFile(path, size, nominal) for path, size, nominal in site.static_files()]
    dynamic = [DynamicPage(*d) for d in site.dynamic_pages()]
    return write_docroot(root, workload="support", static=static, dynamic=dynamic, params=params)


def tcp_docroot(root: str | Path) -> DocrootReport:
    """The document root of the tcp workload: ``/static/file1k.bin`` (and the PHP pages)."""
    return write_docroot(
        root, workload="tcp", static=[], dynamic=[], params={"file": TCP_PATH, "bytes": TCP_BYTES}
    )


def read_manifest(root: str | Path) -> Manifest:
    """The manifest of a document root written by :func:`write_docroot`."""
    path = Path(root) / "manifest.json"
    return Manifest.from_dict(files.read_json(path, what=Manifest.WHAT), source=path)


def missing_paths(root: str | Path, paths: Iterable[str]) -> list[str]:
    """The distinct request paths (query stripped) with no file under ``root``."""
    root = Path(root)
    out = []
    for path in sorted(set(paths)):
        try:
            found = _local(root, path).is_file()
        except ParameterError:
            found = False
        if not found:
            out.append(path)
    return out
