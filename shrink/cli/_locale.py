"""Numbers in options are read with a point, in every locale.

shrink never reads a number by the locale: ``--levels 1,5`` is the two levels 1 and 5
under ``LC_NUMERIC=de_DE.UTF-8`` as under ``C``, a comma always parting a list's items.
A user whose locale writes 1.5 as "1,5" may have meant one level: when the locale's
decimal point is a comma and a list is two whole numbers, a note says how it was read.
Likewise when its thousands separator is a point and an item is a whole number of one to
three digits, a point and three digits (``10.000``, ten thousand there): read as 10.
And when a list reads as one number with a thousands comma, as en_US (and every locale
whose separator is a comma) writes it (``1,500``, ``1,000,000``): read as its items,
said in every locale, since the user's own may differ from the one they copied it from.
"""

from __future__ import annotations

import locale
import os
import re

import typer

_SPLIT_DECIMAL = re.compile(r"\s*(\d+),(\d+)\s*")
_THOUSANDS_POINT = re.compile(r"\s*([1-9]\d{0,2})\.(\d{3})\s*")
_GROUP_HEAD, _GROUP = re.compile(r"[1-9]\d{0,2}"), re.compile(r"\d{3}")


def _grouped(text: str) -> list[str] | None:
    """The numbers ``text`` reads as when its commas are thousands commas, every one with
    at least one (``1,500`` -> 1500; ``1,000,2,000`` -> 1000 and 2000), or None: a list
    of such numbers ran as its groups without a word, and ``1,2,500`` is not one."""
    items = [x.strip() for x in text.split(",")]
    numbers: list[list[str]] = []
    for item in items:
        if numbers and _GROUP.fullmatch(item):
            numbers[-1].append(item)  # (three digits join the number before, greedily)
        elif _GROUP_HEAD.fullmatch(item):
            numbers.append([item])
        else:
            return None
    if not numbers or any(len(n) < 2 for n in numbers):
        return None
    return ["".join(n) for n in numbers]


def _separators() -> tuple[str, str]:
    """The user's locale's (LC_ALL, else LC_NUMERIC, else LANG) decimal point and
    thousands separator; ("", "") for C or a locale not installed. Python reads numbers
    in the C locale whatever the environment says; the user's is set only to be asked,
    then put back."""
    name = next((v for k in ("LC_ALL", "LC_NUMERIC", "LANG") if (v := os.environ.get(k))), "")
    if not name or name in ("C", "POSIX") or name.startswith("C."):
        return "", ""
    before = locale.setlocale(locale.LC_NUMERIC)
    try:
        locale.setlocale(locale.LC_NUMERIC, name)
        conv = locale.localeconv()
        return str(conv["decimal_point"]), str(conv["thousands_sep"])
    except locale.Error:  # not installed: nothing to say by it
        return "", ""
    finally:
        locale.setlocale(locale.LC_NUMERIC, before)


def _decimal_comma() -> bool:
    """Whether the user's locale writes a decimal comma."""
    return _separators()[0] == ","


def note_split_decimal(option: str, text: str) -> None:
    """Say on stderr how ``text`` (two whole numbers parted by a comma, ``1,5``) was read,
    when the locale's decimal point is a comma: two items, not one number; the same of a
    list that reads as one number with a thousands comma (``1,500``), in any locale; and
    how an item such as ``10.000`` was read (10), when the locale's thousands separator
    is a point."""
    m = _SPLIT_DECIMAL.fullmatch(text)
    items = [x for x in text.split(",") if _THOUSANDS_POINT.fullmatch(x)]
    grouped = _grouped(text)
    if m is None and not items and not grouped:
        return
    point, thousands = _separators()
    meant = []
    if m is not None and point == ",":
        meant.append(f"for the one value {m[1]}.{m[2]}, type {option} {m[1]}.{m[2]}")
    if grouped:
        whole = " and ".join(grouped)
        commas = "thousands commas" if len(grouped) > 1 else "a thousands comma"
        meant.append(f"for {whole} ({commas}), type {option} {','.join(grouped)}")
    if meant:
        parts = [x.strip() for x in text.split(",")]
        values = ", ".join(parts[:-1]) + " and " + parts[-1]
        count = {2: "two", 3: "three", 4: "four"}.get(len(parts), str(len(parts)))
        typer.echo(
            f"note: {option} {text.strip()} is read as {count} values, {values}: a comma "
            f"parts a list's items in every locale; {'; '.join(meant)}",
            err=True,
        )
    if items and thousands == ".":
        for item in items:
            a, b = _THOUSANDS_POINT.fullmatch(item).groups()  # type: ignore[union-attr]
            typer.echo(
                f"note: {option} value {item.strip()} is read as {float(item):g}: a point is "
                f"the decimal point in every locale; for {a}{b}, type {a}{b} (no separator)",
                err=True,
            )
