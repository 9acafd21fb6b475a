"""A sweep's ``--runlogs`` folder: refused where the curve would go, then held."""

from __future__ import annotations

import contextlib
from pathlib import Path

from shrink.errors import OptionError, printable

__all__ = ["claim_runlogs", "refuse_curve_among_runlogs"]


def refuse_curve_among_runlogs(output: Path, runlogs: Path | None) -> None:
    """An OptionError when the curve would be written where a RunLog is: ``--runlogs`` the
    curve's own path (its folder was made there first), or ``-o`` a RunLog's name in it.
    Both ran every level, then said "another run wrote it while this one ran" of the
    sweep's own RunLog and wrote the curve beside it as CURVE.1.json or run000-rf1.1.parquet."""
    import os
    import re

    from shrink.replay.live import RUNLOG_NAMES

    if runlogs is None:
        return
    # (as the files are reached: a symlinked folder on either side is the same folder)
    out, logs = Path(os.path.realpath(output)), Path(os.path.realpath(runlogs))
    if out == logs:
        why = "is the curve's own path (-o): give the run logs a folder of their own"
    elif out.parent == logs and re.fullmatch(RUNLOG_NAMES, out.name):
        why = f"would hold a run log named as the curve -o {printable(out.name)}: name it otherwise"
    else:
        return
    raise OptionError("--runlogs", f"{printable(str(runlogs))} {why}")


def claim_runlogs(held: contextlib.ExitStack, runlogs: Path | None) -> None:
    """``--runlogs`` held by this sweep alone (two sweeps wrote each other's run001...),
    and cleared of the temporaries a killed sweep left there while writing a RunLog; the
    engine processes' parts a sweep stopped before their merge left are named, and kept."""
    from shrink.cli._replay_opts import note_stale_parts
    from shrink.folder_locks import claimed, drop_temporaries
    from shrink.replay.live import RUNLOG_NAMES
    from shrink.replay.part_dirs import stale_parts

    if runlogs is not None:
        held.enter_context(claimed(runlogs, "--runlogs"))
        drop_temporaries(runlogs, RUNLOG_NAMES)
        stems = RUNLOG_NAMES.removesuffix(r"\.parquet")
        note_stale_parts(runlogs, stale_parts(runlogs, stems), "a sweep's run")
