"""How every command reads in its help and takes its options, set in one place.

- A flag shows no value type: ``--json``, not ``--json <bool>`` (which suggests
  ``--json true``, refused).
- The usage line names arguments in capitals, as Unix tools do: ``TRACE``, and
  ``[TRACE]`` when optional (not ``{trace}``).
- ``--output`` is a hidden alias of ``--out``: ``-o`` means ``--out`` everywhere.
- ``--help`` and the completion flags, not given, are ``False`` (typer leaves them
  ``None``, then coerces that with a pydantic validator: importing pydantic for
  it doubled the time a command took to start). Only flags whose value goes to
  their callback alone: a flag of a command may mean something by ``None``.

``tidy(app)`` gives every command and group of a Typer app these classes.
"""

from __future__ import annotations

from typing import Any

import typer
from typer.core import TyperCommand, TyperGroup
from typer.models import DefaultPlaceholder

_ALIASES = {"--output": "--out"}


def _tidy_param(param: Any) -> None:
    if getattr(param, "param_type_name", "") == "argument":
        if param.metavar is None:
            param.metavar = param.name.upper()
    elif getattr(param, "is_flag", False):
        if param.metavar is None:
            param.metavar = ""
        if param.default is None and not param.expose_value:
            param.default = False


def _usage_pieces(cmd: Any, ctx: Any) -> list[str]:
    pieces = [cmd.options_metavar] if cmd.options_metavar else []
    for param in cmd.get_params(ctx):
        if getattr(param, "param_type_name", "") != "argument":
            continue
        name = param.metavar or param.name.upper()
        if param.nargs != 1:
            name += "..."
        pieces.append(name if param.required else f"[{name}]")
    return pieces


def _aliases(args: list[str]) -> list[str]:
    out: list[str] = []
    for i, a in enumerate(args):
        if a == "--":
            return out + args[i:]
        flag, eq, value = a.partition("=")
        out.append(_ALIASES[flag] + eq + value if flag in _ALIASES else a)
    return out


class _TidyParams:
    """A command's or group's parameters with the metavars its help shows (:func:`_tidy_param`)."""

    def get_params(self, ctx: Any) -> list[Any]:
        params = super().get_params(ctx)  # type: ignore[misc]
        for p in params:
            _tidy_param(p)
        return params


class ShrinkCommand(_TidyParams, TyperCommand):
    def collect_usage_pieces(self, ctx: Any) -> list[str]:
        return _usage_pieces(self, ctx)

    def parse_args(self, ctx: Any, args: list[str]) -> list[str]:
        return super().parse_args(ctx, _aliases(args))


class ShrinkGroup(_TidyParams, TyperGroup):
    pass


def tidy(app: typer.Typer) -> None:
    """Give every command and group of ``app`` (recursively) the classes above."""
    if isinstance(app.info.cls, DefaultPlaceholder) or app.info.cls is None:
        app.info.cls = ShrinkGroup
    for cmd in app.registered_commands:
        if cmd.cls in (None, TyperCommand):
            cmd.cls = ShrinkCommand
    for group in app.registered_groups:
        if group.typer_instance is not None:
            tidy(group.typer_instance)
