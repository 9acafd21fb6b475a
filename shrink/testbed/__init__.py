"""The real testbed: one server replica per mapping replica, pinned and capped.

The server is a recipe (:mod:`shrink.testbed.recipe`): ``lighttpd-php-cgi`` (the
default), ``nginx-php-fpm``, or a user's TOML file (:mod:`shrink.testbed.command`);
:class:`shrink.testbed.fake_recipe.FakeRecipe` stands in for unit tests.
``up`` lives in :mod:`shrink.testbed.lifecycle`, ``status`` in
:mod:`shrink.testbed.status`, ``down`` in :mod:`shrink.testbed.teardown`; the
in-process fake target for unit tests of later stages is :mod:`shrink.testbed.fake`.
"""

from shrink.testbed.config import ServerSettings
from shrink.testbed.lifecycle import down, up
from shrink.testbed.recipe import BUILTIN_RECIPES, ServerRecipe
from shrink.testbed.servers import load_recipe
from shrink.testbed.state import ReplicaState, TestbedState
from shrink.testbed.status import status

__all__ = [
    "BUILTIN_RECIPES",
    "ReplicaState",
    "ServerRecipe",
    "ServerSettings",
    "TestbedState",
    "down",
    "load_recipe",
    "status",
    "up",
]
