"""Server recipes by name: the built-in stacks, or a recipe file ``RECIPE.toml``."""

from __future__ import annotations

import os

from shrink.errors import RecipeError
from shrink.testbed.command import CommandRecipe
from shrink.testbed.lighttpd import LighttpdPhpCgi
from shrink.testbed.nginx import NginxPhpFpm
from shrink.testbed.recipe import BUILTIN_RECIPES, DEFAULT_RECIPE, ServerRecipe

__all__ = ["load_recipe"]


def load_recipe(spec: str | None) -> ServerRecipe:
    """A built-in recipe by name, or the recipe in a TOML file (``NAME`` or ``PATH.toml``)."""
    spec = spec or DEFAULT_RECIPE
    if spec == "lighttpd-php-cgi":
        return LighttpdPhpCgi()
    if spec == "nginx-php-fpm":
        return NginxPhpFpm()
    if spec.endswith(".toml") or os.sep in spec:
        return CommandRecipe.read(spec)
    raise RecipeError(
        f"no such built-in server; use one of {', '.join(BUILTIN_RECIPES)} or a recipe "
        "file RECIPE.toml",
        recipe=spec,
    )
