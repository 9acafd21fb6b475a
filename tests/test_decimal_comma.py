"""A list option under a decimal-comma locale: read as a list, and a note says so.

``--levels 1,5`` typed for 1.5 under ``LC_NUMERIC=de_DE.UTF-8`` ran the levels 1 and 5
without a word. shrink reads numbers with a point in every locale; when the locale's
decimal point is a comma and the list is two whole numbers, a note says how it was read.
"""

from __future__ import annotations

import locale

import pytest

from shrink.cli import _locale
from shrink.cli.sweep_cmd import _levels
from shrink.errors import OptionError

pytestmark = pytest.mark.compute


@pytest.fixture
def comma_locale(monkeypatch):
    """de_DE.UTF-8 as the user's locale, installed or not (its decimal point a comma)."""
    real = locale.localeconv
    asked: list[str] = []

    def setlocale(category, name=None):
        if name is None:
            return "C"
        asked.append(name)
        if name != "C":
            monkeypatch.setattr(
                locale, "localeconv", lambda: {**real(), "decimal_point": ",", "thousands_sep": "."}
            )
        else:
            monkeypatch.setattr(locale, "localeconv", real)
        return name

    monkeypatch.setattr(locale, "setlocale", setlocale)
    for var in ("LC_ALL", "LC_NUMERIC", "LANG"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("LC_NUMERIC", "de_DE.UTF-8")
    return asked


def test_two_whole_numbers_under_a_decimal_comma_locale_are_read_as_two_with_a_note(
    comma_locale, capsys
):
    assert _levels("1,5") == [1.0, 5.0]
    err = capsys.readouterr().err
    assert "note: --levels 1,5 is read as two values, 1 and 5" in err, err
    assert "type --levels 1.5" in err, err
    assert comma_locale == ["de_DE.UTF-8", "C"]  # asked, then put back


@pytest.mark.parametrize("text", ["1,2,4", "0.5,1", "1", "0.500", "1.50", "10.0001", "1000.000"])
def test_other_lists_say_nothing(comma_locale, capsys, text):
    _levels(text)
    assert capsys.readouterr().err == ""


def test_a_point_locale_says_nothing(monkeypatch, capsys):
    for var in ("LC_ALL", "LC_NUMERIC", "LANG"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("LANG", "C.UTF-8")
    assert _levels("1,5") == [1.0, 5.0]
    assert capsys.readouterr().err == ""
    assert not _locale._decimal_comma()


@pytest.mark.parametrize(
    ("text", "read", "meant"),
    [("10.000", [10.0], "10000"), ("1.500", [1.5], "1500"), ("0.5,2.000", [0.5, 2.0], "2000")],
)
def test_a_thousands_point_under_a_locale_that_writes_one_is_read_as_a_decimal_point_with_a_note(
    comma_locale, capsys, text, read, meant
):
    """de_DE writes ten thousand 10.000: shrink reads 10, and says so."""
    assert _levels(text) == read
    err = capsys.readouterr().err
    item = text.split(",")[-1]
    assert f"note: --levels value {item} is read as {read[-1]:g}" in err, err
    assert f"for {meant}, type {meant} (no separator)" in err, err
    assert err.count("note:") == 1, err


def test_a_thousands_point_under_a_point_locale_says_nothing(monkeypatch, capsys):
    for var in ("LC_ALL", "LC_NUMERIC", "LANG"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("LANG", "C.UTF-8")
    assert _levels("10.000") == [10.0]
    assert capsys.readouterr().err == ""


@pytest.mark.parametrize("lang", ["en_US.UTF-8", "C.UTF-8"])
@pytest.mark.parametrize(
    ("text", "read", "meant"),
    [("1,500", [1.0, 500.0], "1500"), ("12,345,678", [12.0, 345.0, 678.0], "12345678")],
)
def test_a_list_that_reads_as_one_number_with_a_thousands_comma_is_noted(
    monkeypatch, capsys, lang, text, read, meant
):
    """en_US writes fifteen hundred 1,500: `--levels 1,500` ran the levels 1 and 500
    without a word, where de_DE's 10.000 was noted. (``1,000,000`` is refused for its
    zero levels, after the same note.)"""
    real = locale.localeconv
    monkeypatch.setattr(locale, "setlocale", lambda category, name=None: name or "C")
    monkeypatch.setattr(locale, "localeconv", lambda: {**real(), "thousands_sep": ","})
    for var in ("LC_ALL", "LC_NUMERIC", "LANG"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("LANG", lang)
    assert _levels(text) == read
    err = capsys.readouterr().err
    values = text.split(",")
    said = ", ".join(values[:-1]) + " and " + values[-1]
    assert f"note: --levels {text} is read as " in err and f" values, {said}: a comma" in err, err
    assert f"for {meant} (a thousands comma), type --levels {meant}" in err, err
    assert err.count("note:") == 1, err


@pytest.mark.parametrize("text", ["1,2,4", "0.5,1", "1,50", "1,5000", "1,500.5", "05,500"])
def test_lists_that_do_not_read_as_one_grouped_number_say_nothing(monkeypatch, capsys, text):
    for var in ("LC_ALL", "LC_NUMERIC", "LANG"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("LANG", "C.UTF-8")
    _levels(text)
    assert capsys.readouterr().err == ""


def test_a_thousands_comma_under_a_decimal_comma_locale_gives_both_readings(comma_locale, capsys):
    assert _levels("1,500") == [1.0, 500.0]
    err = capsys.readouterr().err
    assert "note: --levels 1,500 is read as two values, 1 and 500" in err, err
    assert "type --levels 1.500; for 1500 (a thousands comma), type --levels 1500" in err, err
    assert err.count("note:") == 1, err


@pytest.mark.parametrize(
    ("text", "meant"), [("1,000,2,000", "1000 and 2000"), ("1,500,2,500", "1500 and 2500")]
)
def test_a_list_of_numbers_each_with_a_thousands_comma_is_noted(monkeypatch, capsys, text, meant):
    """Only one grouped number was noted: `--levels 1,500,2,500` was refused for naming
    level 500 twice, `1,000,2,000` for its zero levels, neither with a word of commas."""
    for var in ("LC_ALL", "LC_NUMERIC", "LANG"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("LANG", "C.UTF-8")
    with pytest.raises(OptionError):
        _levels(text)
    err = capsys.readouterr().err
    assert f"note: --levels {text} is read as four values" in err, err
    typed = meant.replace(" and ", ",")
    assert f"for {meant} (thousands commas), type --levels {typed}" in err, err
