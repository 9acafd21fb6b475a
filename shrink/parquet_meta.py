"""Provenance in a Parquet file: the meta as sorted JSON under one schema-metadata key.

Traces and run logs carry what produced them this way, readable by any Parquet tool
(pyarrow, DuckDB, polars); the same table and meta give the same bytes.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
from pydantic import BaseModel

from shrink import files
from shrink.atomic import atomic_file
from shrink.jsonout import dumps
from shrink.schemas import TraceMeta

__all__ = ["META_KEY", "meta_of", "schema_meta", "write_with_meta"]

META_KEY = b"shrink"


def schema_meta(meta: dict[str, Any]) -> dict[bytes, bytes]:
    """The schema metadata that carries ``meta``."""
    return {META_KEY: dumps(meta, sort_keys=True, default=str).encode()}


def write_with_meta(
    table: pa.Table, meta: dict[str, Any], path: Path, model: type[BaseModel] = TraceMeta
) -> Path:
    """Write ``table`` to ``path`` (zstd, atomically) with ``meta`` in its schema metadata.

    A ``meta`` its reader (:func:`meta_of` with ``model``) would refuse is refused here,
    before anything is written: ``Trace.from_columns(..., meta={"mode": "closed"})``
    wrote a trace that ``Trace.read_parquet`` then refused."""
    try:
        files.parse_json(schema_meta(meta)[META_KEY], model, source=path, what="metadata")
    except files.TraceFormatError as exc:
        raise ValueError(f"not written, as it could not be read back: {exc}") from None
    # Through the open temporary file, never its name: in a folder another user may
    # write, the name could be swapped for a symlink while pyarrow reopens it.
    with atomic_file(path, "wb") as fh:
        pq.write_table(table.replace_schema_metadata(schema_meta(meta)), fh, compression="zstd")
    return path


def meta_of(
    table: pa.Table, path: Path, what: str, model: type[BaseModel] = TraceMeta
) -> dict[str, Any]:
    """The meta a file's schema metadata carries, validated against ``model``; {} if none."""
    raw = (table.schema.metadata or {}).get(META_KEY)
    return files.parse_json(raw, model, source=path, what=what) if raw else {}
