"""The report's figures import matplotlib, which reads ``./matplotlibrc`` and makes its
config and font-cache folders under ``$HOME``: as root, with another user's ``HOME``
(``su`` without ``-``) it wrote root's folders into their home, and run from a shared
folder a FIFO planted there as ``matplotlibrc`` hung the command."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.compute

ROOT = Path(__file__).resolve().parents[1]
IMPORT = [sys.executable, "-c", "import shrink.report.figures"]


def _env(**more: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if k not in ("MPLCONFIGDIR", "XDG_CONFIG_HOME", "XDG_CACHE_HOME")}  # fmt: skip
    return {**env, "PYTHONPATH": str(ROOT), **more}


def test_nothing_is_written_into_a_home_another_user_may_change(tmp_path):
    home = tmp_path / "theirs"
    home.mkdir()
    home.chmod(0o777)  # (as root, any mode: another user's; here, anyone's to write)
    if os.geteuid() == 0:
        os.chown(home, 65534, 65534)
    subprocess.run(IMPORT, env=_env(HOME=str(home)), check=True, timeout=120)
    assert list(home.iterdir()) == []


def test_a_fifo_planted_as_matplotlibrc_in_the_working_folder_is_not_read(tmp_path):
    os.mkfifo(tmp_path / "matplotlibrc")
    done = subprocess.run(IMPORT, env=_env(), cwd=tmp_path, timeout=30, capture_output=True)
    assert done.returncode == 0, done.stderr.decode()


def test_a_home_that_does_not_exist_is_not_made_and_nothing_is_said(tmp_path):
    """``HOME=/nonexistent`` (``nobody``'s): as root matplotlib made the home and its
    folders; as a user who cannot, it printed two lines of warning every command."""
    home = tmp_path / "nonexistent"
    done = subprocess.run(
        IMPORT, env=_env(HOME=str(home)), timeout=120, capture_output=True, check=True
    )
    assert not home.exists() and done.stderr == b""


def _figure_code() -> str:
    return ("from shrink.report._mpl import matplotlib\n"
            "import matplotlib.pyplot as plt\n"
            "fig, ax = plt.subplots(); ax.set_title('mean 5 ms'); fig.canvas.draw()\n"
            "print(matplotlib.get_backend().lower())\n")  # fmt: skip


def test_a_users_matplotlibrc_does_not_change_or_break_the_figures(tmp_path):
    """``text.usetex: True`` in the user's matplotlibrc (and no LaTeX here): ``predict``
    ended after its sweep with "internal error (RuntimeError: ... latex could not be
    found)", exit 70, and no report."""
    conf = tmp_path / "conf"
    conf.mkdir()
    (conf / "matplotlibrc").write_text("text.usetex: True\nfont.size: 3\n")
    done = subprocess.run(
        [sys.executable, "-c", _figure_code() + "print(matplotlib.rcParams['text.usetex'])"],
        env=_env(MPLCONFIGDIR=str(conf)), timeout=120, capture_output=True, text=True,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["agg", "False"]


def test_an_unknown_mplbackend_is_not_an_internal_error():
    """``MPLBACKEND=garbage``: every command importing matplotlib (predict, validate)
    was "internal error (ValueError: Key backend ...)", exit 70, before it ran."""
    done = subprocess.run(
        [sys.executable, "-c", _figure_code()], env=_env(MPLBACKEND="garbage"),
        timeout=120, capture_output=True, text=True,
    )  # fmt: skip
    assert (done.returncode, done.stdout.strip()) == (0, "agg"), done.stderr


@pytest.mark.parametrize("as_folder", [False, True], ids=["file", "folder"])
def test_a_fifo_named_by_matplotlibrc_is_not_read(tmp_path, as_folder):
    """``MATPLOTLIBRC`` naming a FIFO (or a folder holding one as ``matplotlibrc``), as
    another user's environment may under ``su`` without ``-``: the import hung."""
    fifo = tmp_path / "matplotlibrc" if as_folder else tmp_path / "rc"
    os.mkfifo(fifo)
    named = tmp_path if as_folder else fifo
    code = "import os, shrink.report.figures; print(os.environ['MATPLOTLIBRC'])"
    done = subprocess.run(
        [sys.executable, "-c", code], env=_env(MATPLOTLIBRC=str(named)), timeout=60,
        capture_output=True, text=True,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == str(named)  # the user's, left as it was
