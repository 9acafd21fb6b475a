"""Build a Trace's Arrow table from per-row indices into a small vocabulary.

Synthetic traces hold millions of rows but only a few thousand distinct paths;
``pyarrow.compute.take`` on a vocabulary makes the string columns without
creating one Python string per row, which is what keeps generation fast.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from shrink.trace import Trace

__all__ = ["trace_from_vocab"]


def _take(vocab: Sequence[str], index: np.ndarray) -> pa.Array:
    return pc.take(pa.array(list(vocab), type=pa.string()), pa.array(index, type=pa.int32()))


def trace_from_vocab(
    *,
    session: np.ndarray,
    burst: np.ndarray,
    t: np.ndarray,
    think: np.ndarray,
    path_vocab: Sequence[str],
    path_index: np.ndarray,
    cls_vocab: Sequence[str],
    cls_index: np.ndarray,
    nbytes: np.ndarray,
    status: np.ndarray,
    client_vocab: Sequence[str],
    client_index: np.ndarray,
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
            "method": _take(["GET"], np.zeros(n, dtype=np.int32)),
            "path": _take(path_vocab, path_index),
            "cls": _take(cls_vocab, cls_index),
            "bytes": pa.array(nbytes, type=pa.int64()),
            "status": pa.array(status, type=pa.int32()),
            "rt": pa.array(np.full(n, np.nan), type=pa.float64()),
            "client": _take(client_vocab, client_index),
        }
    )
    return Trace.from_table(table, meta)
