"""How every command reads in its help and takes its options, set in one place.

- A flag shows no value type: ``--json``, not ``--json <bool>`` (which suggests
  ``--json true``, refused).
- The usage line names arguments in capitals, as Unix tools do: ``TRACE``, and
  ``[TRACE]`` when optional (not ``{trace}``).
- ``--output`` is a hidden alias of ``--out``: ``-o`` means ``--out`` everywhere.
- A usage error (an unknown option, a missing argument, a value refused by its
  parser) is one line, as shrink's own errors are: "error: no such option: --x
  (...); see shrink sample --help", exit 2, not click's usage, hint and error lines.
- ``--help`` and the completion flags, not given, are ``False`` (typer leaves them
  ``None``, then coerces that with a pydantic validator: importing pydantic for
  it doubled the time a command took to start). Only flags whose value goes to
  their callback alone: a flag of a command may mean something by ``None``.

``tidy(app)`` gives every command and group of a Typer app these classes.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import IO, Any

import typer
from typer.core import TyperCommand, TyperGroup
from typer.models import DefaultPlaceholder

_ALIASES = {"--output": "--out"}


def _tidy_param(param: Any) -> None:
    if getattr(param, "param_type_name", "") == "argument":
        if param.metavar is None:
            param.metavar = param.name.upper()
        shown = getattr(param, "display_type_rich", None)
        if shown is not None and not getattr(param, "_path_lower", False):
            # a Path argument read by a parser of shrink's (machine write OUT) showed
            # "<Path>", the annotation's name, where every other path is "<path>"
            def display(ctx: Any, _shown: Any = shown) -> Any:
                text = _shown(ctx)
                return "<path>" if text == "<Path>" else text

            param.display_type_rich = display
            param._path_lower = True
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


# typer >= 0.23 carries its own copy of click (typer._click): its exceptions are not
# click's. Taken from the one typer says it raises, whichever copy that is.
_UsageError = next(c for c in typer.BadParameter.__mro__ if c.__name__ == "UsageError")
_ClickException = next(c for c in typer.BadParameter.__mro__ if c.__name__ == "ClickException")


class UsageLine(_ClickException):  # type: ignore[misc,valid-type]
    """A click usage error, said in one line: its message, then the command's --help."""

    def __init__(self, err: Any) -> None:
        super().__init__(err.format_message())
        self.exit_code = err.exit_code
        self.line = usage_line(err)

    def show(self, file: IO[Any] | None = None) -> None:
        from shrink.cli._common import error_line

        error_line(self.line)


def usage_line(err: Any) -> str:
    """``err``'s message (its first letter small, as shrink's lines are) and where to
    read more: "no such option: --x (Possible options: --out); see shrink sample --help"."""
    msg = " ".join(err.format_message().split()).rstrip(".")
    if msg[:2].istitle():  # "Invalid value", "No such option"; not "'-o' ..." or "HTTP"
        msg = msg[0].lower() + msg[1:]
    where = f"{err.ctx.command_path} --help" if err.ctx is not None else "--help"
    return f"{msg}; see {where}"


@contextmanager
def _one_line_usage() -> Iterator[None]:
    try:
        yield
    except UsageLine:
        raise
    except _UsageError as err:
        if type(err).__name__ == "NoArgsIsHelpError":
            raise  # a group named alone (``shrink testbed``): its help, as asked
        raise UsageLine(err) from None


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
    """Every usage error below a group (its own, its commands' and sub-groups') comes
    through its ``make_context`` or ``invoke``: made one line there (:class:`UsageLine`)."""

    def make_context(self, *args: Any, **kwargs: Any) -> Any:
        with _one_line_usage():
            return super().make_context(*args, **kwargs)

    def invoke(self, ctx: Any) -> Any:
        with _one_line_usage():
            return super().invoke(ctx)


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
