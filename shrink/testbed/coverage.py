"""Does a document root serve a trace? The paths it lacks would all come back 404.

A request's path (without its query string, percent-decoded) is served when it
names a file under the docroot, or a folder with an index file. A replay against
a docroot that lacks the trace's paths measures 404s, not the server's work; the
replay counts them as failures, and this check says so before anything runs.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from shrink.trace import Trace
from shrink.wire import served_path

__all__ = ["DocrootCoverage", "docroot_coverage"]

_INDEX = ("index.html", "index.php")


@dataclass(frozen=True)
class DocrootCoverage:
    """Distinct paths of a trace and the ones its docroot lacks."""

    docroot: Path
    paths: int
    missing: list[str]
    requests_missing: int
    requests: int

    def warning(self, trace_name: str) -> str | None:
        """One line for the user, or None when every path is there."""
        if not self.missing:
            return None
        eg = ", ".join(self.missing[:3])
        return (
            f"warning: document root {self.docroot} lacks {len(self.missing):,} of the "
            f"{self.paths:,} paths of {trace_name} ({self.requests_missing:,} of "
            f"{self.requests:,} requests; e.g. {eg}): they will fail (404) and count as failures"
        )


def _served(root: Path, path: str) -> bool:
    rel = served_path(path)
    if "\x00" in rel:
        return False
    target = (root / rel).resolve()
    if target != root and root not in target.parents:
        return False  # outside the docroot: never served
    if target.is_file():
        return True
    return target.is_dir() and any((target / n).is_file() for n in _INDEX)


def docroot_coverage(trace: Trace, docroot: str | Path) -> DocrootCoverage:
    """Which of ``trace``'s distinct paths ``docroot`` lacks."""
    root = Path(docroot).resolve()
    counts: dict[str, int] = {}
    for p in trace.column("path").tolist():
        counts[p] = counts.get(p, 0) + 1
    missing = sorted(p for p in counts if not _served(root, str(p)))
    return DocrootCoverage(
        docroot=root,
        paths=len(counts),
        missing=missing,
        requests_missing=sum(counts[p] for p in missing),
        requests=len(trace),
    )
