"""What a stopped command says it leaves: the files it kept, in words."""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

__all__ = ["KeptParts", "kept_files", "kept_words", "plural"]


def plural(n: int, noun: str) -> str:
    """``1 session``, ``2 sessions``, ``1,328 requests``: counts with thousands separators."""
    if n == 1:
        return f"{n:,} {noun}"
    return f"{n:,} {noun}es" if noun.endswith(("s", "x", "ch", "sh")) else f"{n:,} {noun}s"


@dataclass(frozen=True)
class KeptParts:
    """The parts a stopped ``split`` wrote into ``folder``: the first ``written`` of
    ``parts``, which hold none of the other parts' sessions."""

    folder: Path
    written: int
    parts: int

    def __str__(self) -> str:
        from shrink.report.text import parts_kept_text

        return parts_kept_text(self.written, self.parts, str(self.folder))


def kept_files(
    kept: Sequence[object], written: Sequence[Path], failed: str | None = None
) -> list[str]:
    """What a stopped command leaves, in words: ``kept`` (what it wrote to keep its
    measurements) and then the files it had ``written`` before the stop that those do
    not name, but for records of what ran (:func:`shrink.kept_records.record_only`);
    more than three in one folder are counted there, not listed. A file written once
    and then ``failed`` to be written again is its earlier copy, whole: said
    so, since the error's line names it first as the file not written."""
    from shrink.atomic import unchanged_since_noted
    from shrink.kept_records import is_record

    said = " ".join(str(k) for k in kept)
    # A folder kept whole (a Path) says every file in it.
    dirs = [k for k in kept if isinstance(k, Path) and k.is_dir()]
    dirs += [k.folder for k in kept if isinstance(k, KeptParts)]  # (said with their count)
    # Only what is still there: a failed ``testbed up`` removes the run root it had
    # written its configs into, and "kept" named those removed files.
    new = [
        p
        for p in written
        if str(p) not in said
        and not any(Path(p).is_relative_to(d) for d in dirs)
        and os.path.lexists(p)
        and unchanged_since_noted(p)  # not another run's since (its X.partial.json)
        and not is_record(p)  # a stopped testbed's state: nothing measured
    ]
    # One file written under two names (up wrote a state by its resolved path, down by
    # the relative one the user gave) is said once.
    once: dict[str, Path] = {}
    for p in new:
        once.setdefault(os.path.abspath(p), p)
    new = list(once.values())
    # A curve kept with its count of levels (predict's measured-curve.partial.json)
    out = [f"{k} ({plural(k.levels, 'finished level')})" if _counted(k) else str(k) for k in kept]
    if failed is not None and Path(failed) in new:
        new.remove(Path(failed))
        out.append("its earlier whole copy (without this update)")
    folders: dict[Path, list[Path]] = {}
    for p in new:
        folders.setdefault(p.parent, []).append(p)
    for folder, files in folders.items():
        out += [str(p) for p in files] if len(files) <= 3 else [f"{len(files)} files in {folder}"]
    return out


def _counted(kept: object) -> bool:
    """Whether ``kept`` is a curve file named with its levels (a ``KeptCurve``)."""
    return isinstance(getattr(kept, "levels", None), int) and hasattr(kept, "path")


def kept_words(kept: Sequence[object], written: Sequence[Path], failed: str | None = None) -> str:
    """The end of a stopped command's error line: "; kept A, B" (:func:`kept_files`),
    or "; nothing measured was kept" when all it wrote records what ran (a predict that
    failed at its first level had written only its stopped testbed's state, and said
    "kept" of it, the word for saved measurements), or nothing."""
    files = kept_files(kept, written, failed)
    if files:
        return "; kept " + ", ".join(files)
    from shrink.kept_records import is_record

    return "; nothing measured was kept" if any(is_record(p) for p in written) else ""
