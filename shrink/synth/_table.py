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

from shrink.trace import Trace

__all__ = ["VocabColumn", "trace_from_vocab"]


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
