"""What shrink puts in its own environment for itself, kept out of the servers' own.

A server started as the user shrink runs as inherits shrink's environment (the user's
own settings, which it may rely on). shrink sets a few variables for its own libraries
(OpenBLAS's thread count, matplotlib's folder): those are the user's only where the user
set them, so :func:`for_servers` takes out what :func:`set_own` added.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

__all__ = ["for_servers", "set_own"]

# The variables this process added to its environment, with the value it gave them.
_ADDED: dict[str, str] = {}


def set_own(name: str, value: str, *, keep_users: bool = False) -> None:
    """Set ``name`` in this process's environment for its own use; with ``keep_users``,
    a value the user set is kept (and is then theirs, passed on)."""
    if keep_users and name in os.environ:
        return
    os.environ[name] = value
    _ADDED[name] = value


def for_servers(environ: Mapping[str, str]) -> dict[str, str]:
    """``environ`` without what :func:`set_own` added (unless changed since)."""
    return {k: v for k, v in environ.items() if _ADDED.get(k) != v}
