"""A file option's path as the user typed it (a typer ``parser``).

typer turns an option's text into a :class:`~pathlib.Path`, which drops a trailing
``/`` and ``.``: ``-o out.json/`` and ``-o out.json/.`` wrote a file named out.json,
where the user, naming a folder, would have had "Is a directory" / "Not a directory"
from the kernel. A file option's text that names a folder is refused here, before the
command runs; a folder option keeps typer's Path (its trailing ``/`` names the folder
it is).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import typer

from shrink.errors import printable

__all__ = ["file_named", "file_out"]


def file_named(value: str | Path) -> Path:
    """``value`` as a file's path, or :class:`typer.BadParameter` when its text names a
    folder (ends in ``/``, or its last part is ``.``) or is empty."""
    text = os.fspath(value)
    if not text:  # (Path("") is ".": said as "output . is a directory", a name not typed)
        raise typer.BadParameter("an empty name names no file; name a file")
    if text.endswith("/") or os.path.basename(text) == ".":
        raise typer.BadParameter(f"{printable(text)} names a folder; name a file")
    return Path(text)


def file_out(help: str) -> Any:
    """The ``-o``/``--out`` option of a command that writes one file (its text checked by
    :func:`file_named`; not asked to be readable: it is written)."""
    return typer.Option(
        "-o", "--out", readable=False, parser=file_named, metavar="<path>", help=help
    )
