"""A fast, vectorised, keyed hash of (seed, key, ...) to a uniform number in [0, 1).

Every sampler decides "keep this unit?" by ``unit_hash(seed, key) < alpha``
instead of drawing from a random generator. That makes the decision a pure
function of (seed, unit), which gives three properties a random stream cannot:

* nesting: the units kept at alpha = 0.25 are a subset of those kept at 0.5;
* order independence: the decision for a session does not depend on which
  other sessions the trace holds or in what order they come;
* determinism across processes and machines (no global RNG state).

The mixer is splitmix64's finaliser (Steele, Lea and Flood, 2014), which
passes BigCrush when fed a counter; here it is chained over the key parts.
"""

from __future__ import annotations

import numpy as np

__all__ = ["DOMAIN_OBJECT", "DOMAIN_REQUEST", "DOMAIN_SESSION", "splitmix64", "unit_hash"]

_MASK64 = (1 << 64) - 1
_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_M1 = np.uint64(0xBF58476D1CE4E5B9)
_M2 = np.uint64(0x94D049BB133111EB)
_S30, _S27, _S31, _S11 = np.uint64(30), np.uint64(27), np.uint64(31), np.uint64(11)

# Each decision level draws from its own stream, so that (say) the object
# decisions of a session are independent of whether the session sampler keeps it.
DOMAIN_SESSION = 0x5E55_1011
DOMAIN_OBJECT = 0x0B1E_C7
DOMAIN_REQUEST = 0x2E0_0E57


def splitmix64(x: np.ndarray) -> np.ndarray:
    """splitmix64 of each element of a uint64 array (wrapping arithmetic)."""
    z = np.asarray(x, dtype=np.uint64) + _GOLDEN
    z = (z ^ (z >> _S30)) * _M1
    z = (z ^ (z >> _S27)) * _M2
    return z ^ (z >> _S31)


def _as_u64(values: np.ndarray | int) -> np.ndarray:
    """Reinterpret integers as uint64 (two's complement for negative ids)."""
    arr = np.asarray(values)
    if arr.dtype == np.uint64:
        return arr
    if arr.dtype.kind in "iub":
        return arr.astype(np.int64, copy=False).view(np.uint64)
    raise TypeError(f"hash keys must be integers, got dtype {arr.dtype}")


def unit_hash(seed: int, *keys: np.ndarray, domain: int) -> np.ndarray:
    """Uniform numbers in [0, 1), one per element of the (broadcast) integer ``keys``.

    ``seed`` is any Python int (reduced modulo 2**64); ``domain`` separates the
    streams of different decision levels.
    """
    with np.errstate(over="ignore"):
        h = splitmix64(np.array([(int(seed) ^ (domain << 32)) & _MASK64], dtype=np.uint64))
        for key in keys:
            h = splitmix64(h ^ _as_u64(key))
        # The top 53 bits make an exactly representable double in [0, 1).
        return (h >> _S11).astype(np.float64) * (1.0 / (1 << 53))
