"""Is sampling at this level consistent with where the load is balanced?

SHRiNK samples i.i.d. *at the level where load balancing happens*. With
HTTP/1.1 keep-alive a session holds a connection to the server it is balanced
to for its whole life, so the concurrent-connection count belongs to the
balancing unit:

* balanced per session or per connection (a session is replayed on its own
  keep-alive connection, so the two coincide in a trace): sample sessions
  (``session`` or ``stratified``). Object or request sampling keeps every
  user and its connection while removing most of its requests, so a server
  scaled to alpha would hold 1/alpha times as many concurrent connections
  per unit of capacity as the original.
* balanced per request: every client keeps a connection to every server, so
  each original server sees every session's connection; sample requests.
  Session sampling would show the scaled servers only alpha of those
  connections, understating the connection load.

Without keep-alive each request opens its own connection, connections scale
with requests, and every level is allowed. On an open-loop trace every
session is one request, so all levels coincide and every level is allowed.
An inconsistent choice raises :class:`~shrink.errors.ParameterError` with
the explanation, unless ``force`` is given: then it warns with
:class:`~samplers.ConsistencyWarning` and returns the explanation so the
caller can record it.
"""

from __future__ import annotations

import warnings

from samplers._protocol import ConsistencyWarning
from shrink.errors import ParameterError

__all__ = ["BALANCE_LEVELS", "SAMPLE_LEVELS", "check_consistency"]

SAMPLE_LEVELS = ("session", "object", "request", "stratified")
BALANCE_LEVELS = ("session", "connection", "request")

# The unit each sampler draws on a closed-loop trace.
_UNIT = {"session": "session", "stratified": "session", "object": "object", "request": "request"}
# The sampling units consistent with each way of balancing load (keep-alive on).
_CONSISTENT = {"session": {"session"}, "connection": {"session"}, "request": {"request"}}


def _explain(level: str, balance: str) -> str:
    unit = _UNIT[level]
    fix = "--level request" if balance == "request" else "--level session (or stratified)"
    if unit != "session":
        # Object and request sampling keep every user, and so every connection.
        return (
            f"sampling at the {level} level while load is balanced per {balance} with "
            "HTTP/1.1 keep-alive is inconsistent: every user keeps its keep-alive "
            f"connection while only a fraction alpha of its {unit}s remain, so the server "
            "scaled to alpha would see about 1/alpha times more concurrent connections "
            f"(per unit of capacity) than the original. Use {fix}, or --force to sample "
            "anyway."
        )
    return (
        f"sampling at the {level} level while load is balanced per request with HTTP/1.1 "
        "keep-alive is inconsistent: each original server holds a connection from every "
        "session, while each scaled server would see only the sampled sessions' "
        "connections (a fraction alpha as many), so the connection load would not scale "
        f"with the capacity. Use {fix}, or --force to sample anyway."
    )


def check_consistency(
    level: str,
    balance: str = "session",
    keepalive: bool = True,
    force: bool = False,
    *,
    open_loop: bool = False,
) -> str | None:
    """Raise ParameterError if ``level`` sampling contradicts ``balance`` load balancing.

    Returns None when consistent; with ``force``, warns and returns the explanation.
    """
    if level not in SAMPLE_LEVELS:
        raise ParameterError(f"level == {level!r}, must be one of {', '.join(SAMPLE_LEVELS)}.")
    if balance not in BALANCE_LEVELS:
        raise ParameterError(f"balance == {balance!r}, must be one of {', '.join(BALANCE_LEVELS)}.")
    if not keepalive or open_loop or _UNIT[level] in _CONSISTENT[balance]:
        return None
    why = _explain(level, balance)
    if not force:
        raise ParameterError(why)
    warnings.warn(why, ConsistencyWarning, stacklevel=2)
    return why
