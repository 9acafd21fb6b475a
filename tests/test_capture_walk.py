"""The vectorised record walk of classic pcap finds exactly what the plain loop finds.

Block starts are guesses; the walk must never use one the true chain does not
land on. These files are big enough (over 1 MB) for the vectorised walk to run,
and are damaged, padded with fake record headers inside payload, and cut.
"""

from __future__ import annotations

import struct

import numpy as np
import pytest

from shrink.ingest.capture import pcap_walk
from shrink.ingest.capture.pcap_walk import walk_chain, walk_plain

pytestmark = pytest.mark.compute

LIMIT = 262_144


def _pcap(sizes: list[int], payload: bytes = b"", endian: str = "<") -> bytearray:
    out = bytearray(struct.pack(endian + "IHHiIII", 0xA1B2C3D4, 2, 4, 0, 0, 65535, 1))
    for i, size in enumerate(sizes):
        body = (payload * (size // max(len(payload), 1) + 1))[:size] if payload else bytes(size)
        out += struct.pack(endian + "IIII", 1_700_000_000 + i // 100, i % 1000, size, size)
        out += body
    return out


def _both(data: bytes, endian: str = "<") -> None:
    buf = np.frombuffer(bytes(data), dtype=np.uint8)
    n = buf.size
    fast, stop = walk_chain(buf, n, endian, LIMIT, 1_000_000)
    plain, pstop = walk_plain(buf, n, endian, LIMIT)
    assert stop == pstop
    assert fast.tolist() == plain


@pytest.fixture(params=["as-shipped", "many-blocks"])
def blocks(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
    """The walk as shipped, and cut into many short blocks (many guesses, many joins)."""
    if request.param == "many-blocks":
        monkeypatch.setattr(pcap_walk, "_PER_BLOCK", 40)
        monkeypatch.setattr(pcap_walk, "_FEW", 2)


@pytest.mark.parametrize("seed", range(6))
def test_walk_matches_the_plain_loop(seed: int, blocks: None) -> None:
    rng = np.random.default_rng(seed)
    # Record sizes as in web traffic: ACKs, full segments, odd lengths, a few jumbo ones.
    sizes = rng.choice(
        [54, 60, 66, 1514, 900, 4000, 70_000], 20000, p=[0.3, 0.1, 0.1, 0.4, 0.07, 0.025, 0.005]
    )
    # A payload that looks like record headers (a sane length and time at every
    # offset) makes wrong block starts likely: the walk must still agree.
    fake = struct.pack("<IIII", 1_700_000_000, 5, 48, 48) + bytes(48)  # chains every 64 bytes
    data = _pcap(sizes.tolist(), fake if seed % 2 else b"")
    assert len(data) > 1 << 20
    _both(data)
    cut = bytes(data[: int(rng.integers(len(data) // 2, len(data)))])
    _both(cut)  # a record cut short somewhere
    bad = bytearray(data)
    at = int(rng.integers(1 << 19, len(data) - 16))
    bad[at : at + 4] = b"\xff\xff\xff\x7f"  # a garbage length somewhere (maybe in a payload)
    _both(bad)


def test_walk_big_endian_and_small_files(blocks: None) -> None:
    _both(_pcap([1514, 60] * 1500, endian=">"), ">")
    _both(_pcap([100] * 20))
    _both(_pcap([]))
