"""Numbers in options are read with a point, in every locale.

shrink never reads a number by the locale: ``--levels 1,5`` is the two levels 1 and 5
under ``LC_NUMERIC=de_DE.UTF-8`` as under ``C``, a comma always parting a list's items.
A user whose locale writes 1.5 as "1,5" may have meant one level: when the locale's
decimal point is a comma and a list is two whole numbers, a note says how it was read.
"""

from __future__ import annotations

import locale
import os
import re

import typer

_SPLIT_DECIMAL = re.compile(r"\s*(\d+),(\d+)\s*")


def _decimal_comma() -> bool:
    """Whether the user's locale (LC_ALL, else LC_NUMERIC, else LANG) writes a decimal
    comma. Python reads numbers in the C locale whatever the environment says; the
    user's is set only to be asked, then put back."""
    name = next((v for k in ("LC_ALL", "LC_NUMERIC", "LANG") if (v := os.environ.get(k))), "")
    if not name or name in ("C", "POSIX") or name.startswith("C."):
        return False
    before = locale.setlocale(locale.LC_NUMERIC)
    try:
        locale.setlocale(locale.LC_NUMERIC, name)
        return locale.localeconv()["decimal_point"] == ","
    except locale.Error:  # not installed: nothing to say by it
        return False
    finally:
        locale.setlocale(locale.LC_NUMERIC, before)


def note_split_decimal(option: str, text: str) -> None:
    """Say on stderr how ``text`` (two whole numbers parted by a comma, ``1,5``) was read,
    when the locale's decimal point is a comma: two items, not one number."""
    m = _SPLIT_DECIMAL.fullmatch(text)
    if m is None or not _decimal_comma():
        return
    a, b = m.groups()
    typer.echo(
        f"note: {option} {text.strip()} is read as two values, {a} and {b}: a comma parts "
        f"a list's items in every locale; for the one value {a}.{b}, type {option} {a}.{b}",
        err=True,
    )
