"""The machines the tests model, read from the project's own specs."""

from __future__ import annotations

from pathlib import Path

from shrink.machine import Machine

ROOT = Path(__file__).resolve().parent.parent.parent

# The papers' server: 2 sockets x 4 cores (Nehalem), a dual-port NIC with 4 queues a port.
NEHALEM = Machine.read_toml(ROOT / "examples" / "machines" / "nehalem-2s.toml")
