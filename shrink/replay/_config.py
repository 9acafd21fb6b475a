"""How the replay engine talks to its target (read by the engine, its connections, owners)."""

from __future__ import annotations

from dataclasses import dataclass

from shrink.checks import MAX_SECONDS, MIN_TIMEOUT_S, MIN_TIMEOUT_WHY
from shrink.errors import ParameterError, ReplayError


@dataclass
class EngineConfig:
    """How the engine talks to the target.

    ``routing``: ``hash`` (a session's hash picks its replica address) or
    ``round-robin`` (sessions in start order). ``conns_per_session``: the
    connections a session's embedded requests spread over; 1, as httperf
    --wsesslog uses by default (its session.c fills a session's first connection
    before opening another, up to 32 calls pipelined on it; this engine sends
    them one after another on that connection).
    ``max_pool``: open mode's connection limit per address (beyond it a request
    waits for a connection; the wait is latency, counted in ``pool_waits``).
    """

    targets: list[tuple[str, int]]
    routing: str = "hash"
    conns_per_session: int = 1
    timeout: float = 10.0
    drain: float = 5.0
    spin: float = 0.002
    max_pool: int = 1024
    conn_per_request: bool = False
    batch: int = 256

    def __post_init__(self) -> None:
        if not self.targets:
            raise ReplayError("no target address to send requests to")
        if self.routing not in ("hash", "round-robin"):
            raise ParameterError(f"routing == {self.routing!r}, must be one of hash, round-robin.")
        if not MIN_TIMEOUT_S <= self.timeout <= MAX_SECONDS:  # a NaN too
            raise ParameterError(
                f"timeout == {self.timeout!r}, must be at least {MIN_TIMEOUT_S * 1e3:g} ms "
                f"({MIN_TIMEOUT_WHY})."
            )
        if self.conns_per_session < 1:
            raise ParameterError(
                f"conns_per_session == {self.conns_per_session}, must be in [1, inf)."
            )
