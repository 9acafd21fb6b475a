"""Seeds and mutators that reach states the byte and schema mutators of
:mod:`helpers.fuzzing` did not: the real traces of the shared data as seeds, splices of
two formats, compressed inputs (gzip whole, cut short, or two members; bzip2, xz, and a
zstd frame's magic, which must be refused in one line), UTF-8 and UTF-16 byte order
marks, lines ending in CR alone, pcap with the nanosecond magic and other link types,
pcapng with block types the reader does not know, Parquet tables whose footer is valid
but whose columns have the wrong types, and TOML with unicode keys, duplicate tables and
integers past 64 bits. ``bench/bench_fuzz.py --states`` gives every reader these."""

from __future__ import annotations

import bz2
import gzip
import io
import lzma
import random
import re
import struct
from dataclasses import replace
from pathlib import Path
from typing import Any

SHARED_REAL = ("data", "real")
_LOGS = ("nasa_aug95_excerpt.repaired.log", "usask_access_log_excerpt.log",
         "elastic_apache_logs_combined.log")  # fmt: skip
_CAPTURES = ("ppa1e_http.cap", "ppa_http_ip4and6.pcapng", "ppa_http_post.pcapng",
             "scapy_http_chunk.pcap", "zeek_http_pipelined-requests.pcap",
             "zeek_http_1000-requests-one-dropped-response.pcap.gz", "zeek_web.pcap")  # fmt: skip
# Link types a capture may carry: null/loopback, raw IP, Linux SLL and SLL2, IPv4, IPv6, 802.11.
_LINKTYPES = (0, 101, 113, 276, 228, 229, 105, 12, 14, 65535)
_OTHER: dict[str, list[bytes]] = {}  # a seed of each reader: what a splice takes from


def _head_lines(data: bytes, n: int) -> bytes:
    return b"".join(data.splitlines(keepends=True)[:n])


def real_seeds(name: str, shared: Path) -> list[bytes]:
    """The real traces of the shared data that ``name`` reads (their first lines for the
    large logs; the seeds are read many times)."""
    real = shared.joinpath(*SHARED_REAL)
    if not real.is_dir():
        return []
    if name == "clf":
        return [_head_lines((real / n).read_bytes(), 300) for n in _LOGS if (real / n).is_file()]
    if name == "capture":
        return [(real / n).read_bytes() for n in _CAPTURES if (real / n).is_file()]
    return []


def pcap_nanosecond(data: bytes) -> bytes:
    """A classic pcap as written with nanosecond timestamps (magic a1b23c4d)."""
    if data[:4] == b"\xd4\xc3\xb2\xa1":
        return b"\x4d\x3c\xb2\xa1" + data[4:]
    if data[:4] == b"\xa1\xb2\xc3\xd4":
        return b"\xa1\xb2\x3c\x4d" + data[4:]
    return data


def pcap_linktype(data: bytes, linktype: int) -> bytes:
    """A classic pcap with its link type changed (the frames stay as they were)."""
    if data[:4] in (b"\xd4\xc3\xb2\xa1", b"\x4d\x3c\xb2\xa1") and len(data) >= 24:
        return data[:20] + struct.pack("<I", linktype) + data[24:]
    if data[:4] in (b"\xa1\xb2\xc3\xd4", b"\xa1\xb2\x3c\x4d") and len(data) >= 24:
        return data[:20] + struct.pack(">I", linktype) + data[24:]
    return data


def _pcapng_blocks(data: bytes) -> list[tuple[int, int]] | None:
    """(start, length) of each block of a little-endian pcapng, or None."""
    if data[:4] != b"\x0a\x0d\x0d\x0a" or data[8:12] != b"\x4d\x3c\x2b\x1a":
        return None
    out, at = [], 0
    while at + 12 <= len(data):
        (length,) = struct.unpack_from("<I", data, at + 4)
        if length < 12 or length % 4 or at + length > len(data):
            return None
        out.append((at, length))
        at += length
    return out


def pcapng_odd_block(data: bytes, rnd: random.Random) -> bytes:
    """A pcapng with a block of a type the reader may not know inserted between two
    blocks (a custom block, a name resolution, statistics, decryption secrets, a simple
    packet, an obsolete packet block, a type of all ones), or a block's type changed."""
    blocks = _pcapng_blocks(data)
    if not blocks:
        return data
    kind = rnd.choice((0x00000BAD, 0x40000BAD, 4, 5, 0x0000000A, 3, 2, 0x7FFFFFFF, 0xFFFFFFFF,
                       0x0A0D0D0A, 1, 6))  # fmt: skip
    body = bytes(rnd.randrange(256) for _ in range(rnd.choice((0, 4, 8, 20, 64))))
    if kind == 3:  # a simple packet block: its original length, then a frame
        body = struct.pack("<I", rnd.choice((0, 60, 1 << 31))) + body
    block = struct.pack("<II", kind, 12 + len(body)) + body + struct.pack("<I", 12 + len(body))
    at, _ = rnd.choice(blocks[1:] or blocks)
    if rnd.random() < 0.3:  # retype a block in place
        return data[:at] + struct.pack("<I", kind) + data[at + 4 :]
    return data[:at] + block + data[at:]


def mismatched_parquet(data: bytes, rnd: random.Random) -> bytes:
    """The same rows with one column's type changed under a valid footer: text as
    integers, integers as text, floats as integers, a dictionary, a list, a struct, a
    binary, a large string, a timestamp."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    table = pq.read_table(io.BytesIO(data))
    i = rnd.randrange(table.num_columns)
    name, col, n = table.column_names[i], table.column(i), table.num_rows
    choice = rnd.randrange(9)
    if choice == 0:
        new = pa.array(list(range(n)), pa.int64())
    elif choice == 1:
        new = pa.array([str(v) for v in col.to_pylist()], pa.string())
    elif choice == 2:
        new = pa.array([1] * n, pa.int8())
    elif choice == 3:
        new = pa.array([str(v) for v in col.to_pylist()]).dictionary_encode()
    elif choice == 4:
        new = pa.array([[v] for v in col.to_pylist()])
    elif choice == 5:
        new = pa.array([{"v": v} for v in col.to_pylist()])
    elif choice == 6:
        new = pa.array([str(v).encode() for v in col.to_pylist()], pa.binary())
    elif choice == 7:
        new = pa.array([str(v) for v in col.to_pylist()], pa.large_string())
    else:
        new = pa.array([0] * n, pa.timestamp("ns"))
    table = table.set_column(i, name, new)
    sink = io.BytesIO()
    pq.write_table(table, sink)
    return sink.getvalue()


_UNICODE_KEYS = ('"ключ"', '"名前"', '"\\u00e9t\\u00e9"', '"\U0001f600"', '"a\\u0000b"',
                 '"\\u202e"', '"name\\u200b"')  # fmt: skip
_BIG_INTS = ("18446744073709551616", "-9223372036854775809", "9" * 4400, "0x" + "f" * 40,
             "1_000_000_000_000_000_000_000", "+0", "-0", "0o777777777777777777777777")  # fmt: skip


def toml_states(data: bytes, rnd: random.Random) -> bytes:
    """A TOML document with a unicode key, a table or key given twice, or an integer
    past 64 bits (or past Python's 4,300 digits)."""
    text = data.decode("utf-8", errors="replace")
    choice = rnd.randrange(4)
    if choice == 0:  # a unicode key beside or instead of a real one
        keys = [m.span(1) for m in re.finditer(r"^(\w+)\s*=", text, re.MULTILINE)]
        key = rnd.choice(_UNICODE_KEYS)
        if keys and rnd.random() < 0.5:
            a, b = rnd.choice(keys)
            return (text[:a] + key + text[b:]).encode()
        return (f"{key} = 1\n" + text).encode()
    if choice == 1:  # a table given twice
        tables = re.findall(r"^\[+[^\]\n]+\]+\s*$", text, re.MULTILINE)
        line = rnd.choice(tables) if tables else "[a]"
        return (text + f"\n{line}\nx = 1\n").encode()
    if choice == 2:  # a key given twice
        keys = re.findall(r"^[^\[#\n][^=\n]*=[^\n]*$", text, re.MULTILINE)
        return (text + "\n" + (rnd.choice(keys) if keys else "a = 1")).encode()
    values = [m.span(1) for m in re.finditer(r"=\s*([-+]?\d[\d_]*)\s*$", text, re.MULTILINE)]
    if not values:
        return data
    a, b = rnd.choice(values)
    return (text[:a] + rnd.choice(_BIG_INTS) + text[b:]).encode()


def _gzip_cut(data: bytes, rnd: random.Random) -> bytes:
    z = gzip.compress(data, mtime=0)
    return z[: rnd.randrange(10, max(11, len(z)))]


def _gzip_two(data: bytes, rnd: random.Random) -> bytes:
    other = rnd.choice(_pool()) if rnd.random() < 0.3 else data
    return gzip.compress(data, mtime=0) + gzip.compress(other, mtime=0)


def _gzip_trailing(data: bytes, rnd: random.Random) -> bytes:
    return gzip.compress(data, mtime=0) + rnd.choice((b"\x00" * 8, b"garbage", b"\x1f\x8b"))


def _pool() -> list[bytes]:
    return [s for seeds in _OTHER.values() for s in seeds] or [b""]


def _splice(data: bytes, rnd: random.Random) -> bytes:
    """The head of one format on the tail of another (or the other way round)."""
    other = rnd.choice(_pool())
    a, b = rnd.randrange(len(data) + 1), rnd.randrange(len(other) + 1)
    return data[:a] + other[b:] if rnd.random() < 0.5 else other[:b] + data[a:]


def _cr_only(data: bytes, rnd: random.Random) -> bytes:
    return data.replace(b"\r\n", b"\n").replace(b"\n", b"\r")


_WRAPS: tuple[Any, ...] = (
    lambda d, r: gzip.compress(d, mtime=0),
    _gzip_cut,
    _gzip_two,
    _gzip_trailing,
    lambda d, r: bz2.compress(d),
    lambda d, r: lzma.compress(d),
    lambda d, r: b"\x28\xb5\x2f\xfd" + d[:64],  # a zstd frame's magic (no zstd module here)
    lambda d, r: b"\xef\xbb\xbf" + d,
    lambda d, r: b"\xef\xbb\xbf\xef\xbb\xbf" + d,
    lambda d, r: d.decode("utf-8", "replace").encode("utf-16"),
    lambda d, r: d.decode("utf-8", "replace").encode("utf-16-le"),
    lambda d, r: d.decode("utf-8", "replace").encode("utf-16-be"),
    _cr_only,
    _splice,
)


def state_mutator(name: str, inner: Any, fallback: Any) -> Any:
    """A mutator: the reader's own (``inner``, or byte mutation) and then, two times in
    five, a format-level change of this module."""

    def mutator(data: bytes, rnd: random.Random) -> bytes:
        base = inner or fallback
        if name == "capture" and rnd.random() < 0.25:
            data = pcap_linktype(pcap_nanosecond(data), rnd.choice(_LINKTYPES))
            data = pcapng_odd_block(data, rnd)
        elif name in ("trace", "runlog") and rnd.random() < 0.25:
            try:
                return mismatched_parquet(data, rnd)
            except Exception:  # not a Parquet seed (a splice): mutate its bytes
                return fallback(data, rnd)
        elif name in ("machine", "recipe") and rnd.random() < 0.3:
            data = toml_states(data, rnd)
        else:
            data = base(data, rnd)
        if rnd.random() < 0.4:
            data = rnd.choice(_WRAPS)(data, rnd)
        return data

    return mutator


def with_states(reader: Any, shared: Path, fallback: Any) -> Any:
    """``reader`` with the real traces among its seeds and :func:`state_mutator` as its
    structural mutator (every reader's seeds are kept for splices)."""
    old_seeds = reader.seeds

    def seeds(tmp: Path) -> list[bytes]:
        got = old_seeds(tmp)
        got = [*got, *real_seeds(reader.name, shared)]
        if reader.name == "capture":
            got += [pcap_nanosecond(s) for s in got if s[:4] == b"\xd4\xc3\xb2\xa1"][:1]
        _OTHER[reader.name] = got[:3]
        return got

    return replace(reader, seeds=seeds, structural=state_mutator(reader.name, reader.structural,
                                                                  fallback))  # fmt: skip


def splice_pool(readers: dict[str, Any], tmp: Path) -> None:
    """Seeds of every other reader (a few of each), for :func:`_splice` to take from."""
    for name, r in readers.items():
        if name in _OTHER or name == "demo":
            continue
        sub = tmp / f"pool-{name}"
        sub.mkdir(exist_ok=True)
        try:
            _OTHER[name] = [s[:4096] for s in r.seeds(sub)[:2]]
        except Exception:  # a seed that needs what this machine lacks: no splice from it
            continue
