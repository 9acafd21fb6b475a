"""The real testbed: one lighttpd + php-cgi FastCGI pool per replica, pinned and capped.

``up`` / ``status`` / ``down`` live in :mod:`shrink.testbed.lifecycle`; the
in-process fake target for unit tests of later stages is :mod:`shrink.testbed.fake`.
"""

from shrink.testbed.lifecycle import down, status, up
from shrink.testbed.state import ReplicaState, TestbedState

__all__ = ["ReplicaState", "TestbedState", "down", "status", "up"]
