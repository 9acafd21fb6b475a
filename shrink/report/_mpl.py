"""matplotlib imported so that root reads and writes nothing another user put in its way.

At import, matplotlib reads ``./matplotlibrc`` (the working folder's) and makes its
config and font-cache folders under ``$HOME`` (``~/.config/matplotlib``,
``~/.cache/matplotlib``). As root with ``HOME`` another user's (``su`` without ``-``)
it made root's folders and a font cache in their home; run from a shared folder
such as ``/tmp``, a FIFO planted there as ``matplotlibrc`` hung the report. So: a
config folder another user could change is replaced by a private temporary one, and
a ``matplotlibrc`` in the working folder that is not a plain file of root's or this
user's is not read (the import runs from ``/``).

The figures are drawn with matplotlib's own defaults, not the user's: a
``matplotlibrc`` with ``text.usetex: True`` (and no LaTeX) ended ``predict`` after
its sweep as "internal error", without its report, and ``MPLBACKEND=garbage`` (a
backend shrink never uses) ended every command that imports matplotlib before it ran.
"""

from __future__ import annotations

import atexit
import os
import shutil
import stat
import tempfile
from pathlib import Path

from shrink.programs import safe_to_run

__all__ = ["matplotlib"]


def _usable(folder: Path) -> bool:
    """Whether ``folder``, or the nearest folder above it that exists, is this user's or
    root's and no one else's to write (:func:`shrink.programs.safe_to_run`), and this
    user's to write: else matplotlib warns on two lines and makes a temporary one of
    its own anyway (a user whose home is root's, such as ``nobody``'s ``/nonexistent``)."""
    p = Path(os.path.abspath(folder))
    while not os.path.lexists(p) and p != p.parent:
        p = p.parent
    return safe_to_run(p) and os.access(p, os.W_OK | os.X_OK)


def _config_dir() -> None:
    named = os.environ.get("MPLCONFIGDIR")
    home = Path(os.path.expanduser("~"))
    xdg = (os.environ.get("XDG_CONFIG_HOME"), os.environ.get("XDG_CACHE_HOME"))
    subs = (".config", ".cache")
    wanted = (
        [Path(named)]
        if named
        else [Path(x) if x else home / sub for x, sub in zip(xdg, subs, strict=True)]
    )
    # A home that does not exist is not made: root would make it (a folder at /).
    homeless = not named and not all(xdg) and not home.is_dir()
    if not homeless and all(_usable(d) for d in wanted):
        return
    from shrink.testbed.registry import scratch_base  # ($TMPDIR too may be theirs)

    private = tempfile.mkdtemp(prefix="shrink-matplotlib-", dir=scratch_base())
    atexit.register(shutil.rmtree, private, True)
    from shrink.own_env import set_own

    set_own("MPLCONFIGDIR", private)


def _working_rc_trusted() -> bool:
    try:
        st = os.lstat("matplotlibrc")
    except OSError:
        return True  # none (or no working folder): matplotlib reads none there either
    mine = st.st_uid in (0, os.geteuid()) and not st.st_mode & 0o022
    return stat.S_ISREG(st.st_mode) and mine


_config_dir()
os.environ.pop("MPLBACKEND", None)  # Agg below; an unknown name was a ValueError at import
# $MATPLOTLIBRC (a file, or a folder holding one) is read at import too: a FIFO named
# there hung every command that draws (root with another user's environment, `su`
# without `-`). What it says is dropped by rcdefaults below: it is not read at all.
_users_rc = os.environ.pop("MATPLOTLIBRC", None)
try:
    if _working_rc_trusted():
        import matplotlib
    else:
        _here = os.getcwd()
        os.chdir("/")
        try:
            import matplotlib
        finally:
            os.chdir(_here)
finally:
    if _users_rc is not None:  # the user's, passed on as it was
        os.environ["MATPLOTLIBRC"] = _users_rc
matplotlib.rcdefaults()  # the figures as the project draws them, whatever rc was read
matplotlib.use("Agg")
