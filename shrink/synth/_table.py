"""Build a Trace's Arrow table from per-row indices into a small vocabulary.

Synthetic traces hold millions of rows but only a few thousand distinct paths;
``pyarrow.compute.take`` on a vocabulary makes the string columns without
creating one Python string per row, which is what keeps generation fast.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from shrink.checks import MAX_SECONDS, check_int, check_positive
from shrink.errors import ParameterError
from shrink.trace import Trace

__all__ = ["MAX_REQUESTS", "VocabColumn", "check_size", "trace_from_vocab"]

# The most requests a synthetic trace may hold: about 60 bytes a row in memory, and a
# few copies while it is built, so a few GB. Past it the arrays were asked for anyway
# (7 PiB for --rate 1e12) or the session walk ran for days.
MAX_REQUESTS = 50_000_000


def check_size(duration: float, seed: object, expected: float, asked: str) -> float:
    """``duration`` if a trace of it, drawn with ``seed``, holds a trace's times and about
    ``expected`` requests (what ``asked`` gives) fit; a ParameterError before any draw."""
    duration = check_positive(duration, "duration")
    check_int(seed, "seed", low=0)
    if duration > MAX_SECONDS:
        raise ParameterError(
            f"duration == {duration:g} s, must be at most {MAX_SECONDS:.0f} s (a century, "
            "the longest a trace may span)."
        )
    if not expected <= MAX_REQUESTS:
        raise ParameterError(
            f"{asked} make about {expected:.3g} requests, more than the {MAX_REQUESTS:,} "
            "a synthetic trace may hold; shorten the duration."
        )
    return duration


@dataclass(frozen=True)
class VocabColumn:
    """A string column as each row's index into a small vocabulary: ``vocab[index]``."""

    vocab: Sequence[str]
    index: np.ndarray

    def take(self) -> pa.Array:
        vocab = pa.array(list(self.vocab), type=pa.string())
        return pc.take(vocab, pa.array(self.index, type=pa.int32()))


def trace_from_vocab(
    *,
    session: np.ndarray,
    burst: np.ndarray,
    t: np.ndarray,
    think: np.ndarray,
    path: VocabColumn,
    cls: VocabColumn,
    nbytes: np.ndarray,
    status: np.ndarray,
    client: VocabColumn,
    meta: Mapping[str, Any],
) -> Trace:
    """A trace whose string columns are ``vocab[index]``; numeric columns as given."""
    n = int(session.size)
    table = pa.table(
        {
            "session": pa.array(session, type=pa.int64()),
            "burst": pa.array(burst, type=pa.int32()),
            "t": pa.array(t, type=pa.float64()),
            "think": pa.array(think, type=pa.float64()),
            "method": VocabColumn(["GET"], np.zeros(n, dtype=np.int32)).take(),
            "path": path.take(),
            "cls": cls.take(),
            "bytes": pa.array(nbytes, type=pa.int64()),
            "status": pa.array(status, type=pa.int32()),
            "rt": pa.array(np.full(n, np.nan), type=pa.float64()),
            "client": client.take(),
        }
    )
    return Trace.from_table(table, meta)
