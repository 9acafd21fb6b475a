"""Does a document root serve a trace? The paths it lacks come back 404 (403 for a
hidden one, one reached through a symlink, or a folder there without an index file).

A request's path (without its query string, percent-decoded) is served when it
names a file under the docroot, or a folder with an index file (without its "/":
a redirect to it, 301), no segment of it is hidden (starts with a dot; both stacks
refuse those, 403) and no name on its way is a symlink (refused too). A replay against
a docroot that lacks the trace's paths measures 404s, not the server's work; the
replay counts them as failures, and this check says so before anything runs.
"""

from __future__ import annotations

import os
import re
import shlex
from dataclasses import dataclass, field
from pathlib import Path

from shrink.errors import printable
from shrink.testbed.config import HIDDEN_PATH_RE
from shrink.testbed.private import ServerUser, reader
from shrink.trace import Trace
from shrink.wire import served_path

__all__ = ["DocrootCoverage", "docroot_coverage"]

_INDEX = ("index.html", "index.php")
# The servers that answer a file's path with a "/" after it ("/v2.html/") 404: nginx's
# static module declines a URI ending in "/", and its index module meets ENOTDIR.
# lighttpd serves the file, the "/" its path info (static-file.disable-pathinfo's default).
_FILE_SLASH_404 = frozenset({"nginx-php-fpm"})
# The servers that answer a file's path with more names after it ("/v2.html/extra") 404;
# lighttpd serves the file, the rest its path info (a file met on the way: ENOTDIR), and
# a server the check does not know is given the same benefit as for "/v2.html/".
_PATH_INFO_404 = frozenset({"nginx-php-fpm"})
_HIDDEN = re.compile(HIDDEN_PATH_RE)


@dataclass(frozen=True)
class DocrootCoverage:
    """Distinct paths of a trace and the ones its docroot lacks."""

    docroot: Path
    paths: int
    missing: list[str]
    requests_missing: int
    requests: int
    # there, but not for the server user (root wrote them under umask 077): each a 403
    unreadable: list[str] = field(default_factory=list)
    user: str = ""
    # of ``missing``: there, but neither a file nor a folder (a FIFO: 404; a socket: 500)
    not_files: int = 0
    # of ``missing``: a folder there without an index file (both stacks: 403, no listing)
    no_index: int = 0
    # of ``missing``: reached through a symlink, its own or a folder's on the way, or a
    # folder's index file that is one (nginx ``disable_symlinks on``, lighttpd
    # ``server.follow-symlink = "disable"``: 403)
    symlinked: int = 0

    def warning(self, trace_name: str) -> str | None:
        """One line for the user, or None when every path is there (and readable).

        A trace's path may hold CR, LF or an ANSI escape (a Parquet trace of another
        tool's): the line shows them escaped, so a path cannot forge a line of output
        or recolour the terminal."""
        text = self._text(trace_name)
        return None if text is None else printable(text)

    def _text(self, trace_name: str) -> str | None:
        if not self.missing:
            if not self.unreadable:
                return None
            return (
                f"warning: {self.user}, the user the servers run as, cannot read "
                f"{len(self.unreadable):,} of the {self.paths:,} paths of {trace_name} in "
                f"document root {self.docroot} (e.g. {', '.join(self.unreadable[:3])}): they "
                "will fail (403) and count as failures; chmod -R o+rX "
                + shlex.quote(str(self.docroot))
            )
        eg = ", ".join(self.missing[:3])
        hidden = sum(1 for p in self.missing if _HIDDEN.search("/" + _rel(p)))
        forbidden = [f"the {hidden:,} hidden"] if hidden else []
        if self.no_index:  # "/" of a docroot without index.html: 403 on both stacks, not 404
            s = "s" if self.no_index != 1 else ""
            forbidden.append(f"the {self.no_index:,} folder{s} without an index file")
        if self.symlinked:  # neither stack follows a symlink in the docroot
            forbidden.append(f"the {self.symlinked:,} reached through a symlink")
        why = f"404, or 403 for {' and '.join(forbidden)}" if forbidden else "404"
        if self.not_files:  # a FIFO or a socket planted at a trace's path: not a 404 each
            why += f"; the {self.not_files:,} that are neither file nor folder, 404 or 500"
        # the ones there but unreadable fail as well: said, not left out of the count
        more = (
            f"; and {self.user}, the user the servers run as, cannot read "
            f"{len(self.unreadable):,} more (e.g. {', '.join(self.unreadable[:3])}): 403"
            if self.unreadable
            else ""
        )
        return (
            f"warning: document root {self.docroot} lacks {len(self.missing):,} of the "
            f"{self.paths:,} paths of {trace_name} ({self.requests_missing:,} of "
            f"{self.requests:,} requests; e.g. {eg}): they will fail ({why}) and count as "
            f"failures{more}"
        )


def _rel(path: str) -> str:
    """:func:`served_path` with its "." and ".." segments taken out, as both stacks take
    them out before anything else (nginx after decoding: "/%2e%2e/" too): "/a/../b.html"
    is "b.html", not a hidden path (403), nor one whose symlink the walk missed on a
    missing "a". One going above the docroot holds a NUL: served by neither (nginx 400)."""
    rel = served_path(path)
    out: list[str] = []
    names = rel.split("/")
    for name in names:
        if name == "..":
            if not out:
                return "\x00" + rel
            out.pop()
        elif name != ".":
            out.append(name)
    if names[-1] in (".", "..") and out:
        out.append("")  # ("/a/." names the folder a/, as "/a/" does)
    return "/".join(out)


def _served(root: Path, path: str, server: str = "") -> Path | None:
    """The file ``path`` is served from (an index file for a folder), or None, by the
    testbed's ``server`` (its recipe's name; "" when not known)."""
    rel = _rel(path)
    if "\x00" in rel or _HIDDEN.search("/" + rel):
        return None  # no file has it; a hidden one is refused (403)
    try:
        target = (root / rel).resolve()
    except (OSError, RuntimeError):  # a symlink loop (RuntimeError before Python 3.13)
        return None  # the server cannot open it either
    if target != root and root not in target.parents:
        return None  # outside the docroot: never served
    if _symlinked(root, rel):
        return None  # neither stack follows a symlink (403)
    if target.is_file():
        # ("/v2.html/": pathlib drops the "/"; counted served, nginx answers it 404)
        return None if rel.endswith("/") and server in _FILE_SLASH_404 else target
    if target.is_dir():
        if rel and not rel.endswith("/"):
            # both stacks redirect a folder's path without its "/" to it (301): a
            # success to the replay, which follows no redirect; it was said "fail (404)"
            return target
        return next((target / n for n in _INDEX if (target / n).is_file()), None)
    return None if server in _PATH_INFO_404 else _path_info_file(root, rel)


def _path_info_file(root: Path, rel: str) -> Path | None:
    """The file a name on the way to ``rel`` is (the rest its path info), or None: a
    name missing, or a symlink, on the way (404, 403)."""
    here = root
    for name in [n for n in rel.split("/") if n][:-1]:
        here = here / name
        if here.is_symlink() or not (here.is_dir() or here.is_file()):
            return None
        if here.is_file():
            return here
    return None


def _symlinked_only(root: Path, rel: str) -> bool:
    """:func:`_symlinked`, for a path not refused already as hidden."""
    return "\x00" not in rel and not _HIDDEN.search("/" + rel) and _symlinked(root, rel)


def _symlinked(root: Path, rel: str) -> bool:
    """Whether a name on the way from the docroot to ``rel`` is a symlink, or ``rel``
    is a folder whose first index file there is one: both stacks refuse those (nginx
    ``disable_symlinks on``, lighttpd ``server.follow-symlink = "disable"``), 403. By
    its resolved path, ``latest.html -> v2.html`` was counted served."""
    here = root
    try:
        for name in rel.split("/"):
            if name in ("", "."):
                continue
            here = here.parent if name == ".." else here / name
            if here.is_symlink():
                return True
            if not here.exists():
                return False
        if here.is_dir():
            first = next((here / n for n in _INDEX if os.path.lexists(here / n)), None)
            return first is not None and first.is_symlink()
    except (OSError, ValueError):
        return False
    return False


def _not_a_file(root: Path, path: str) -> bool:
    """Whether ``path`` names something in the docroot that is neither file nor folder."""
    import stat

    rel = _rel(path)
    if "\x00" in rel or _HIDDEN.search("/" + rel) or _symlinked(root, rel):
        return False  # (a symlink to a FIFO: 403, said with the symlinks)
    try:
        # (followed as the servers follow it, as :func:`_served` does: a symlink to a FIFO
        # or socket there, looked at by itself, was said as a plain 404)
        target = (root / rel).resolve()
        if target != root and root not in target.parents:
            return False  # outside the docroot: never served
        mode = target.stat().st_mode
    except (OSError, ValueError, RuntimeError):  # (a loop: RuntimeError before 3.13)
        return False
    return not (stat.S_ISREG(mode) or stat.S_ISDIR(mode))


def _folder_without_index(root: Path, path: str) -> bool:
    """Whether ``path`` names a folder in the docroot with no index file (a 403), ending
    in "/" (without it, both stacks redirect to it: a 301, served)."""
    rel = _rel(path)
    if "\x00" in rel or _HIDDEN.search("/" + rel) or not (rel == "" or rel.endswith("/")):
        return False
    if _symlinked(root, rel):
        return False  # (said with the symlinks)
    try:
        target = (root / rel).resolve()
    except (OSError, ValueError, RuntimeError):
        return False
    inside = target == root or root in target.parents
    return inside and target.is_dir()  # (one with an index is served: not in ``missing``)


def docroot_coverage(
    trace: Trace, docroot: str | Path, user: ServerUser | None = None, server: str = ""
) -> DocrootCoverage:
    """Which of ``trace``'s distinct paths ``docroot`` lacks, and (with the server
    ``user``, when shrink runs as root) which of those there it cannot read; as the
    testbed's ``server`` (its recipe's name: the stacks differ) answers them."""
    root = Path(docroot).resolve()
    counts: dict[str, int] = {}
    for p in trace.column("path").tolist():
        counts[p] = counts.get(p, 0) + 1
    served = {p: _served(root, str(p), server) for p in counts}
    missing = sorted(p for p, f in served.items() if f is None)
    unreadable: list[str] = []
    if user is not None:
        readable = reader(user)
        unreadable = sorted(p for p, f in served.items() if f is not None and not readable(f))
    return DocrootCoverage(
        not_files=sum(1 for p in missing if _not_a_file(root, str(p))),
        no_index=sum(1 for p in missing if _folder_without_index(root, str(p))),
        symlinked=sum(1 for p in missing if _symlinked_only(root, _rel(str(p)))),
        docroot=root,
        paths=len(counts),
        missing=missing,
        requests_missing=sum(counts[p] for p in missing),
        requests=len(trace),
        unreadable=unreadable,
        user=user.name if user is not None else "",
    )
