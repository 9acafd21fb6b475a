"""SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2, SIGALRM, SIGXCPU, SIGVTALRM and
SIGPROF stop a command the same way: as Ctrl-C.

Each raises KeyboardInterrupt (or, inside a run, stops the replay engine, which
then returns what it measured), so the same code keeps the finished levels and
says what it kept, whichever signal came. The exit status tells them apart:
128 + the signal's number (130 for SIGINT, 143 for SIGTERM, 129 for SIGHUP), as
a shell reports a command killed by it.

Outside a command's work (:func:`working`) the same signal is not a
KeyboardInterrupt: typer turns one into a silent exit 130, whatever the signal.
Before the work begins (imports, parsing the arguments) it raises
:class:`NotStarted`, which the entry point reports as a stop with nothing written
(:func:`exit_not_started`); once the work is done, its outputs written, the
signal is ignored and the command exits with its own status.
"""

from __future__ import annotations

import contextlib
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator
from types import FrameType
from typing import NoReturn

__all__ = [
    "STOP_SIGNALS",
    "NotStarted",
    "caused_by_stop",
    "deferred",
    "exit_not_started",
    "exit_status",
    "handled",
    "install",
    "leave_to_loop",
    "note",
    "noted",
    "raise_if_held",
    "received",
    "retake",
    "run_main",
    "stop_main",
    "stop_reason",
    "stopped_by",
    "take_held",
    "working",
]

# SIGQUIT (Ctrl-\), SIGUSR1 and SIGUSR2 too: their default action ends the process at
# once, and a stray `kill -USR1` lost every finished level without a word (exit 138).
STOP_SIGNALS: tuple[signal.Signals, ...] = (
    signal.SIGINT,
    signal.SIGTERM,
    signal.SIGHUP,
    signal.SIGQUIT,
    signal.SIGUSR1,
    signal.SIGUSR2,
    # Those of timers and limits too: ``ulimit -t`` (a batch system's CPU-time limit)
    # sends SIGXCPU, ``timeout -s ALRM`` SIGALRM; each ended a sweep at once, every
    # finished level lost and its RunLog's temporaries left. shrink sets no timer itself.
    signal.SIGALRM,
    signal.SIGXCPU,
    signal.SIGVTALRM,
    signal.SIGPROF,
)

_last = [int(signal.SIGINT)]
# The signals install() took, and how many working() blocks are open.
_taken: list[signal.Signals] = []
_depth = [0]
_pending = [False]
# Whether a command's work has ended (its outermost working() block): a stop from then on
# is the command's no more, even one whose handler runs late (see :func:`_stop`).
_done = [False]
# Open deferred() blocks, and a stop signal that came inside one, held.
_defer = [0]
_held = [False]
# A stop whose handler ran inside a finalizer is owed to the work (at most one): its
# signal, the command it stopped (a count of outermost working() blocks), whether it was
# sent again; and a re-sent signal still to come that a direct stop already took.
_owed = {"sig": 0, "command": 0, "sent": 0, "stray": 0}
_commands = [0]
_owed_lock = threading.RLock()
# Whether a stop was taken in this command's work (an engine's handler, or this module's):
# a second one while the first is under way is the same stop, never one of its own.
_stopping = [False]
# Why the work was stopped when no signal of the user's stopped it (:func:`stop_main`):
# the line's start instead of "interrupted", and an exit status of 1.
_reason = [""]


class NotStarted(BaseException):
    """A stop signal before the command began its work: nothing was written.

    Not a KeyboardInterrupt, which typer would turn into a silent exit 130, nor an
    Exception, which code on the way could take for an error of its own.
    """


def note(signum: int) -> None:
    """Record that ``signum`` stopped the command (a handler of one of STOP_SIGNALS): the
    first in its work only. SIGHUP, then SIGTERM 10 ms later, exited 143, "stopped by
    SIGTERM", where SIGHUP had stopped it."""
    if not (_stopping[0] and _depth[0]):
        _last[0] = int(signum)
    _stopping[0] = True


def received() -> int:
    """The last stop signal recorded (SIGINT if none: a KeyboardInterrupt of Python's)."""
    return _last[0]


def noted() -> int | None:
    """The stop signal :func:`note` recorded, or None when none was: an engine stopped by
    its stop event (a testbed's watch, a server down) was said stopped by SIGINT, the
    default of :func:`received`."""
    return _last[0] if _stopping[0] else None


def stopped_by() -> str:
    """``interrupted`` (Ctrl-C), or ``stopped by SIGTERM`` / ``SIGHUP``: the message's start
    (or the reason :func:`stop_main` was given)."""
    if _reason[0]:
        return _reason[0]
    sig = received()
    return "interrupted" if sig == signal.SIGINT else f"stopped by {signal.Signals(sig).name}"


def exit_status() -> int:
    """The exit status of a command stopped by a signal: 128 + its number; 1 for one
    stopped by :func:`stop_main` (an error of its run, no signal of the user's)."""
    return 1 if _reason[0] else 128 + received()


def stop_reason() -> str:
    """The reason :func:`stop_main` stopped the command with ("" if it did not)."""
    return _reason[0]


def stop_main(reason: str) -> bool:
    """Stop the command's work from another thread as a stop signal does (the finished
    levels kept and said), for ``reason`` (the line's start, e.g. "the Ray cluster's
    head ended"), and exit 1. The signal goes to the main thread, which runs the
    handler at its next Python step, or within a library's wait that looks for signals
    (Ray's ``get``). False (nothing done) outside a command's work, or when every stop
    signal is ignored, or when a stop is already under way."""
    if _depth[0] == 0 or _done[0] or _stopping[0] or not _taken:
        return False
    live = [s for s in _taken if signal.getsignal(s) is _stop]
    if not live:
        return False
    _reason[0] = reason
    signal.pthread_kill(threading.main_thread().ident or 0, live[0])
    return True


def _stop(signum: int, frame: FrameType | None) -> None:
    signum = _settle(signum)
    if not signum:
        return  # the re-sent stop, which a direct one already raised
    if _stopping[0] and _depth[0]:
        # A second stop while the first is under way (an engine's handler took it, and the
        # engine tidies up; or the finished levels are being kept): the same stop. Raised,
        # it cut the engine's close of its RunLog short, the rows lost and its .tmp left.
        return
    note(signum)
    if _depth[0] == 0 and _done[0]:
        # A stop that came in the work's last moment, its handler run at the first check
        # past the outermost block's end (its depth already 0): it was said "before the
        # command started: nothing was written", its outputs written, and the next
        # working() refused. Ignored, as one a moment later is.
        return
    if _depth[0] == 0:
        # Kept until the work would begin: a handler that runs inside a callback of
        # the import system (or a finalizer) has its exception dropped.
        _pending[0] = True
        raise NotStarted
    if _defer[0] > 0:
        _held[0] = True  # raised by raise_if_held(), once what was measured is kept
        return
    if _in_finalizer(frame):
        _stopping[0] = False  # (not taken yet: the re-sent signal takes it)
        _resend_later(signum)  # raised here, it would be dropped (and printed)
        return
    raise KeyboardInterrupt


def _in_finalizer(frame: FrameType | None) -> bool:
    """Whether the handler runs inside a finalizer (``__del__``, or the hook Python
    reports a dropped exception through), where a raised exception is dropped."""
    while frame is not None:
        if frame.f_code.co_name == "__del__" or frame.f_code is _unraisable.__code__:
            return True
        frame = frame.f_back
    return False


def _settle(signum: int) -> int:
    """The stop signal a handler of ``signum`` stands for: the owed one's if a stop is
    owed (a second, direct stop takes its place, and the re-send is cancelled: the exit
    status is the first stop's), or 0 for the re-sent signal when a direct one took it."""
    with _owed_lock:
        if _owed["stray"] == signum:
            _owed["stray"] = 0
            return 0
        first = _owed["sig"]
        if not first:
            return signum
        if _owed["sent"] and signum != first:
            _owed["stray"] = first  # sent, not yet handled: it comes after this one
        _owed.update(sig=0, sent=0)
        return first


def _forget_owed() -> None:
    """A command's work begins or ends: a stop owed to the one before is not sent."""
    with _owed_lock:
        _commands[0] += 1
        _owed.update(sig=0, sent=0, stray=0)
        _stopping[0] = False
        # a stop deferred() held that the command never raised (replay asks for none):
        # the next command of this process raised it at its first raise_if_held()
        _held[0] = False


def _resend_later(signum: int) -> None:
    """Send ``signum`` again a moment later, from another thread, once: its handler then
    runs where the main thread is back in the work. Not sent if a stop came meanwhile
    (:func:`_settle`) or the command's work ended (:func:`working`). (``_thread``:
    ``Thread.start`` waits for the thread, and the signal could come while this
    finalizer still waits.)"""
    import _thread

    with _owed_lock:
        if _owed["sig"]:
            return
        _owed.update(sig=signum, command=_commands[0], sent=0)
        command = _commands[0]
    _thread.start_new_thread(_resend, (signum, command))


def _resend(signum: int, command: int) -> None:
    time.sleep(0.005)
    with _owed_lock:
        owed = _owed["sig"] == signum and not _owed["sent"]
        if owed and _owed["command"] == _commands[0] == command and _depth[0]:
            _owed["sent"] = 1
            # to the main thread, which runs the handler: a system call it waits in ends
            signal.pthread_kill(threading.main_thread().ident or 0, signum)


def _unraisable(args: sys.UnraisableHookArgs) -> None:
    """A NotStarted dropped where it could not be raised: not shown, since
    :func:`working` raises it again before any work. A stop signal's KeyboardInterrupt
    dropped so (its handler ran inside a finalizer, such as ``Popen.__del__``) is sent
    again, to be raised where the work runs: it was shown as "Exception ignored in ...
    Traceback ... KeyboardInterrupt", and the stop itself was lost."""
    if args.exc_type is not None and issubclass(args.exc_type, NotStarted):
        return
    if args.exc_type is not None and issubclass(args.exc_type, KeyboardInterrupt) and _depth[0]:
        # (a finalizer _in_finalizer does not see, such as a weakref's callback: the stop
        # is not taken yet, the re-sent signal takes it; taken, it ignored the re-sent
        # one and every stop after it, and the command ran on to its end)
        _stopping[0] = False
        _resend_later(received())
        return
    sys.__unraisablehook__(args)


def handled() -> list[signal.Signals]:
    """The stop signals this process takes: those not ignored. A signal ignored when
    the command started (``nohup`` ignores SIGHUP) stays ignored: the user asked so."""
    return [s for s in STOP_SIGNALS if signal.getsignal(s) != signal.SIG_IGN]


def _take(handler: Callable[[int, FrameType | None], None] | signal.Handlers) -> None:
    if threading.current_thread() is threading.main_thread():
        for sig in _taken:
            signal.signal(sig, handler)


def install() -> None:
    """Make every stop signal stop the command (on the main thread only): before its
    work, :class:`NotStarted`; during it, KeyboardInterrupt (see :func:`working`)."""
    if threading.current_thread() is not threading.main_thread():
        return
    if not _taken:
        _taken.extend(handled())
    _done[0] = False  # (a command of its own: a stop before its work is NotStarted)
    sys.unraisablehook = _unraisable
    _take(_stop)


def retake() -> None:
    """Take the stop signals :func:`install` took again, as they were: a library that put
    its own handlers in their place (Ray's ``init`` ends the process on SIGTERM with a
    stack dump) would otherwise lose every finished level. Inside :func:`working` only."""
    if _taken and _depth[0] > 0:
        _take(_stop)


def depth() -> int:
    """How many :func:`working` blocks are open (1: the outermost one only)."""
    return _depth[0]


def leave_to_loop() -> None:
    """Block the stop signals on the calling thread, a helper thread of a run's (a window
    sampler, a watch), never the main one: the kernel hands a process's signal to any
    thread not blocking it, and one of these, below the native core's real-time loop on
    its CPU, ran Python's C-level handler up to 0.1 s late; the loop thread (or the main
    thread, which runs Python's handlers) takes them at once."""
    if threading.current_thread() is not threading.main_thread():
        signal.pthread_sigmask(signal.SIG_BLOCK, STOP_SIGNALS)


def ignore() -> None:
    """Ignore the stop signals :func:`install` took: the command has finished (or is
    saying why it stopped), and a signal now would only lose its last line. ``SIG_IGN``,
    not a handler of Python's: the interpreter resets those as it exits."""
    _take(signal.SIG_IGN)


@contextlib.contextmanager
def working() -> Iterator[None]:
    """A command's work: a stop signal inside raises KeyboardInterrupt, and the command
    keeps what it measured and says so. When the outermost block ends the work is done
    and its outputs written: a stop signal from then on is ignored, and the command
    exits with its own status. (Nothing changes unless :func:`install` ran.)"""
    if _pending[0]:
        raise NotStarted
    if _depth[0] == 0:
        _forget_owed()
        _reason[0] = ""
        _take(_stop)  # a command may work in more than one block
    _depth[0] += 1
    try:
        yield
    finally:
        _done[0] = _depth[0] == 1  # (before the depth: no handler runs in between)
        _depth[0] -= 1
        if _depth[0] == 0:
            _forget_owed()
            ignore()


@contextlib.contextmanager
def deferred() -> Iterator[None]:
    """Inside, a stop signal is held, not raised: the work that follows a finished run
    (its statistics, its level recorded) completes, and :func:`raise_if_held` raises it
    then. A signal in the moment after a level's last run lost that level."""
    _defer[0] += 1
    try:
        yield
    finally:
        _defer[0] -= 1


def raise_if_held() -> None:
    """Raise KeyboardInterrupt for a stop signal :func:`deferred` held (once)."""
    if take_held():
        raise KeyboardInterrupt


def take_held() -> bool:
    """Whether :func:`deferred` held a stop signal (once): for a command whose work is
    done when it asks (replay's run, its result made), which says it was stopped and
    exits with the stop's status rather than raise."""
    held, _held[0] = _held[0], False
    return held


def run_main(main: Callable[[], int]) -> NoReturn:
    """Run a script's ``main`` with the stop signals taken (:func:`install`) and exit with
    its status: a script's SIGTERM or SIGHUP then stops it as Ctrl-C does. Not in the
    script's main(), which tests call in their own process."""
    install()
    try:
        code = main()
    except NotStarted:
        exit_not_started()
    raise SystemExit(code)


def caused_by_stop(exc: BaseException) -> bool:
    """Whether ``exc`` was raised because of :class:`NotStarted` (its cause or context,
    however deep): a stop signal that code on the way wrapped in an error of its own."""
    seen: set[int] = set()
    cur: BaseException | None = exc
    while cur is not None and id(cur) not in seen:
        if isinstance(cur, NotStarted):
            return True
        seen.add(id(cur))
        cur = cur.__cause__ or cur.__context__
    return False


def stopped_before_work(exc: BaseException) -> bool:
    """Whether ``exc`` came of a stop signal before the work began: raised because of
    :class:`NotStarted` (:func:`caused_by_stop`), or raised at all once such a signal
    had come (a library whose import the signal cut short failed later in its own
    terms: "TypeError: expected a message argument" from typing_extensions)."""
    return _pending[0] or caused_by_stop(exc)


def exit_not_started() -> NoReturn:
    """Say in one line that a stop signal came before the command began (nothing was
    written), and exit with 128 + its number."""
    ignore()
    with contextlib.suppress(OSError):
        sys.stderr.write(f"{stopped_by()} before the command started: nothing was written\n")
        sys.stderr.flush()
    raise SystemExit(exit_status())
