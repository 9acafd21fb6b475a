"""Helpers shared by the CLI modules: error reporting and JSON output."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import typer
from rich.console import Console

from shrink.errors import ShrinkError

console = Console(stderr=True)


@contextmanager
def cli_errors() -> Iterator[None]:
    """Turn shrink's errors into one clear line on stderr and exit code 1."""
    try:
        yield
    except ShrinkError as exc:
        console.print(f"[bold red]error:[/] {exc}", highlight=False, soft_wrap=True)
        raise typer.Exit(code=1) from None
    except KeyboardInterrupt as exc:
        # Say only what exists: a command that kept files lists them on the exception.
        kept = [str(k) for k in getattr(exc, "kept", [])]
        console.print(
            "[yellow]interrupted[/]: "
            + (f"kept {', '.join(kept)}" if kept else "nothing measured was written"),
            highlight=False,
            soft_wrap=True,
        )
        raise typer.Exit(code=130) from None


def echo_json(obj: Any) -> None:
    sys.stdout.write(json.dumps(obj, indent=2, sort_keys=True, default=_default) + "\n")


def _default(o: Any) -> Any:
    import numpy as np

    if isinstance(o, np.generic):
        return o.item()
    if isinstance(o, np.ndarray):
        return o.tolist()
    if hasattr(o, "to_dict"):
        return o.to_dict()
    raise TypeError(f"not JSON serializable: {type(o).__name__}")
