"""Where a testbed keeps its run directories and sockets, and as whom its servers run.

shrink runs as root to pin, cap and start servers; the servers must not run as
root. As root, every recipe runs its workers as an unprivileged **server user**:
``www-data`` where it exists (Debian's web server user), else ``shrink-www``
(which the set-up creates). A user who is not root runs the servers as itself.

Each ``testbed up`` gets a fresh **run root** (``mkdtemp``: a name nobody can
guess or plant beforehand) under shrink's private directory
(:func:`shrink.testbed.registry.run_dir`: ``/run/shrink`` as root,
``$XDG_RUNTIME_DIR/shrink``, or a folder of this user's checked before use).
Each replica's configs, logs, probe pages and sockets live in it; ``down``
removes it. What the server user may touch there:

* enter the run root and a replica's folder (mode 0711: no listing, no writing);
* read the probe pages (``probe/``, 0755);
* its own folder, ``srv/`` (0700, the server user's): sockets, pid files, temp
  files and the server's own error log.

Every process a recipe starts is started as the server user (after it joined
the replica's cgroup): it never holds root, so nothing it reads, writes or runs
does so as root.

Its environment is not root's: only what a server needs (the locale, the time zone,
PHP's allocator switches, a ``PATH`` without relative entries) is passed on, with
``HOME``, ``USER`` and ``LOGNAME`` the server user's (:func:`server_env`); root's
variables (tokens, ``HOME=/root``) would be readable in ``/proc/PID/environ`` by the
server user, and by every PHP page through ``getenv``.

Config files and the state stay root's, not writable by the server user.
Values written into a server's config (paths) are refused if they hold a
character the config syntax gives a meaning (:func:`config_value`).
"""

from __future__ import annotations

import contextlib
import fcntl
import functools
import grp
import hashlib
import os
import pwd
import re
import shlex
import stat
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from shrink.errors import ParameterError, TestbedError
from shrink.own_env import for_servers
from shrink.testbed.userns import setgroups_denied, unmapped

__all__ = [
    "SERVER_USERS",
    "ServerUser",
    "UpLock",
    "can_run",
    "check_reachable",
    "check_run_dir_reachable",
    "check_server_env",
    "config_value",
    "docroot_writers",
    "forgeable",
    "new_run_root",
    "readable",
    "reader",
    "safe_stem",
    "secure_dir",
    "server_env",
    "server_user",
    "swappable_above",
    "user_name",
]

SERVER_USERS = ("www-data", "shrink-www")


@dataclass(frozen=True)
class ServerUser:
    """The unprivileged user the servers run as (root only)."""

    name: str
    group: str
    uid: int
    gid: int

    def groups(self) -> set[int]:
        return set(os.getgrouplist(self.name, self.gid))


def server_user() -> ServerUser | None:
    """The server user when shrink runs as root; None otherwise (servers run as this user)."""
    if os.geteuid() != 0:
        return None
    for name in SERVER_USERS:
        try:
            pw = pwd.getpwnam(name)
        except KeyError:
            continue
        if pw.pw_uid == 0:
            continue
        try:
            group = grp.getgrgid(pw.pw_gid).gr_name
        except KeyError:
            group = str(pw.pw_gid)
        if (gone := unmapped(pw.pw_uid, pw.pw_gid)) is not None:
            raise TestbedError(
                f"the servers run as {name}, whose {gone} is not mapped: root in a user "
                "namespace (unshare -U) cannot start them as that user; run as the "
                f"machine's root, or map {name}'s IDs into the namespace"
            )
        if setgroups_denied():
            raise TestbedError(
                f"the servers run as {name}, but this user namespace denies setgroups "
                "(/proc/self/setgroups: deny, as unshare -U -r makes it): its root cannot "
                "drop its own groups to start them as that user; run as the machine's root"
            )
        return ServerUser(name, group, pw.pw_uid, pw.pw_gid)
    raise TestbedError(
        f"no unprivileged user to run the servers as ({' or '.join(SERVER_USERS)}); create "
        "one: useradd --system --no-create-home --shell /usr/sbin/nologin shrink-www "
        "(scripts/setup.sh does this)"
    )


# What a server started as the server user inherits from shrink's environment: the
# locale and time zone (its logs and output), and PHP's allocator switches (a choice of
# the server under test, :mod:`shrink.enforce`). Nothing else of root's is passed on.
_PASSED_ON = ("LANG", "LANGUAGE", "TZ", "USE_ZEND_ALLOC", "USE_ZEND_ALLOC_HUGE_PAGES")


def server_env(
    user: ServerUser | None, extra: dict[str, str] | None = None
) -> dict[str, str] | None:
    """The environment a server process starts with: ``extra`` (a recipe's ``env``) over
    shrink's own environment when it runs as this user (less what shrink set for its own
    libraries: :mod:`shrink.own_env`), or,
    as the server user, over only what :data:`_PASSED_ON` names and ``LC_*``, with
    that user's ``HOME``, ``USER`` and ``LOGNAME`` and a ``PATH`` without relative
    entries (a server's lookups must not depend on the folder it runs in)."""
    if user is None:  # less what shrink set for itself (OPENBLAS_NUM_THREADS=1)
        return {**for_servers(os.environ), **(extra or {})}
    env = {k: v for k, v in os.environ.items() if k in _PASSED_ON or k.startswith("LC_")}
    path = [d for d in os.environ.get("PATH", "").split(os.pathsep) if os.path.isabs(d)]
    try:
        home = pwd.getpwuid(user.uid).pw_dir or "/"
    except KeyError:
        home = "/"
    env.update(
        PATH=os.pathsep.join(path) or os.defpath.lstrip(os.pathsep),
        HOME=home,
        USER=user.name,
        LOGNAME=user.name,
    )
    return {**env, **(extra or {})}


def check_server_env(user: ServerUser | None) -> None:
    """Refuse, before anything is started or written, an environment the servers' start
    would die on (:func:`shrink.processes.check_gate_env`: a shell variable such as
    OPTIND that is not a number, passed on to servers that run as this user): it was
    refused only at the first server's start, its configs and run folder made."""
    from shrink.processes import check_gate_env

    try:
        check_gate_env(server_env(user) or {})
    except OSError as exc:
        raise ParameterError(
            f"{exc.strerror}: the servers start behind a POSIX shell, which stops on it; "
            "unset it or set it to a number"
        ) from None


def secure_dir(path: Path, mode: int = 0o700) -> Path:
    """``path`` as a directory of this user that no one else may write, made if missing.

    ``mkdir`` never follows a symlink; one that exists must be a real directory
    owned by this user and not writable by group or others, else it is refused (a
    folder someone planted at a predictable name)."""
    swappable = swappable_above(path)
    if swappable is not None:
        raise TestbedError(
            f"{path} is not a private folder of this user: {swappable} is another user's or "
            "writable by others, who could replace it; set SHRINK_RUN_DIR (or "
            "XDG_RUNTIME_DIR) to a folder of this user's"
        )
    made = False
    with contextlib.suppress(FileExistsError):
        os.mkdir(path, mode)
        made = True
    st = os.lstat(path)
    if (why := _not_private(path, st)) is not None:
        raise TestbedError(
            f"{path} is not a private folder of this user ({why}): not used; remove it or "
            "set SHRINK_RUN_DIR"
        )
    if stat.S_IMODE(st.st_mode) != mode:
        # The mode is shrink's to set on a folder of its own only: SHRINK_RUN_DIR=/ (or
        # /root, /usr/bin) made root chmod that folder to 0711, hiding / from every
        # user's listing, or opening /root to them.
        foreign = [] if made else sorted(n for n in os.listdir(path) if not _ours(n))
        if foreign:
            raise TestbedError(
                f"{path} holds files that are not shrink's ({foreign[0]!r} among them) and "
                f"has mode {stat.S_IMODE(st.st_mode):04o}, not {mode:04o}: its mode is left "
                "as it is and it is not used; set SHRINK_RUN_DIR to a folder of shrink's own"
            )
        os.chmod(path, mode)
    return path


def _not_private(path: Path, st: os.stat_result) -> str | None:
    """Why ``path`` (``st``: its lstat) is not a private folder of this user, or None.
    A file named as SHRINK_RUN_DIR was said as "a symlink, another owner, or writable by
    others", none of which it was."""
    if stat.S_ISLNK(st.st_mode):
        return f"a symlink to {os.readlink(path)}"
    if not stat.S_ISDIR(st.st_mode):
        return "not a folder"
    if st.st_uid != os.geteuid():
        return f"owned by {user_name(st.st_uid)}"
    if st.st_mode & 0o022:
        return f"mode {stat.S_IMODE(st.st_mode):04o}: writable by others"
    return None


# What shrink keeps in its private folder: testbed entries (and their temporary
# names), run roots and locks (up-), a replay's scratch folders (shrink-).
_OUR_NAMES = ("testbed-", ".testbed-", "up-", "shrink-")


def _ours(name: str) -> bool:
    return name.startswith(_OUR_NAMES)


def swappable_above(path: Path) -> Path | None:
    """The first folder above ``path`` (resolved) that another user could change: theirs,
    or writable by others and not sticky (they could rename ``path`` away and put a
    folder or symlink of theirs in its place). None if there is none."""
    me = os.geteuid()
    for d in Path(os.path.realpath(path)).parents:
        st = os.stat(d)
        if st.st_uid not in (0, me) or (st.st_mode & 0o022 and not st.st_mode & stat.S_ISVTX):
            return d
    return None


def safe_stem(state_path: Path) -> str:
    """The state file's name in the names shrink makes for it (run roots, cgroups): only
    the characters ``down`` accepts there, so that a testbed named ``my state.json`` can
    be stopped (its cgroup ``my state-...`` was refused, the servers left running)."""
    return re.sub(r"[^A-Za-z0-9_.-]", "_", state_path.stem)[:16] or "testbed"


# A file in each run root naming its maker (PID and start time), so that one a killed
# ``up`` left before it recorded anything is told from one of an ``up`` still starting.
# (In the folder's name it made the servers' socket paths too long for some folders.)
RUN_ROOT_MAKER = ".maker"


def new_run_root(base: Path, state_path: Path, user: ServerUser | None) -> Path:
    """A fresh run root for one ``up`` under the private ``base`` (see the module docstring),
    its maker named in it (:data:`RUN_ROOT_MAKER`)."""
    with open("/proc/self/stat", "rb") as fh:  # field 22, after the command's ")"
        started = int(fh.read().rsplit(b")", 1)[1].split()[19])
    root = Path(tempfile.mkdtemp(prefix=f"up-{safe_stem(state_path)}-", dir=base))
    fd = os.open(root / RUN_ROOT_MAKER, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    with os.fdopen(fd, "w") as fh:
        fh.write(f"{os.getpid()} {started}\n")
    if user is not None:
        os.chmod(root, 0o711)  # the server user may pass through, not list or write
    return root


def replica_dirs(root: Path, name: str, user: ServerUser | None) -> tuple[Path, Path]:
    """A replica's run dir (root's, 0711: configs, probe pages, start-up output) and the
    server user's own folder in it (0700: sockets, pid files, the server's own logs)."""
    run = root / name
    os.mkdir(run, 0o700)
    os.chmod(run, 0o711 if user is not None else 0o700)  # exactly, whatever the umask
    own = run / "srv"
    os.mkdir(own, 0o700)
    if user is not None:
        os.chown(own, user.uid, user.gid)
    return run, own


def readable(*paths: Path) -> None:
    """Files (0644) and folders (0755) the server user reads: configs, probe pages. Set
    exactly, whatever the umask; they stay root's, so it cannot change them."""
    for p in paths:
        os.chmod(p, 0o755 if p.is_dir() else 0o644)


def can_run(program: str, user: ServerUser | None) -> bool:
    """Whether ``user`` may run ``program`` (enter every folder on its way, execute it)."""
    if user is None:
        return True
    try:
        _check_access(Path(program).resolve(), user, 0o1)
    except (TestbedError, OSError):
        return False
    return True


def _may(st: os.stat_result, user: ServerUser, groups: set[int], need: int) -> bool:
    """Whether ``user`` (in ``groups``) has the ``need`` bits (0o4 read, 0o1 pass) on ``st``."""
    if st.st_uid == user.uid:
        return st.st_mode & (need << 6) == need << 6
    if st.st_gid in groups:
        return st.st_mode & (need << 3) == need << 3
    return st.st_mode & need == need


def reader(user: ServerUser) -> Callable[[Path], bool]:
    """Whether ``user`` may read a file (resolved), as a function that keeps what it
    found of each folder: a trace's thousands of paths share a few folders."""
    groups = user.groups()
    passable: dict[Path, bool] = {}

    def readable(target: Path) -> bool:
        try:
            for d in reversed(target.parents):
                if d not in passable:
                    passable[d] = _may(os.stat(d), user, groups, 0o1)
                if not passable[d]:
                    return False
            return _may(os.stat(target), user, groups, 0o4)
        except OSError:
            return False

    return functools.cache(readable)


def _check_access(target: Path, user: ServerUser, bits: int, what: str = "") -> None:
    groups = user.groups()
    for d in (*reversed(target.parents), target):
        st = os.stat(d)
        need = bits if d == target else 0o1
        if not _may(st, user, groups, need):
            q = shlex.quote(str(d))  # pasted into a shell: a space split it
            fix = f"chmod o+x {q} (pass through only)" if d != target else f"chmod o+rx {q}"
            raise TestbedError(
                f"{what or target}: the servers run as {user.name}, not root, and "
                f"{user.name} cannot {'use' if d == target else 'enter'} {d} (mode "
                f"{stat.S_IMODE(st.st_mode):04o}); {fix}, or put it elsewhere"
            )


# Characters a path may not hold to be written into lighttpd's, nginx's or php-fpm's
# config: quotes and backslashes end or escape a string, ; { } # end a directive or
# start a block or comment, $ expands a variable in nginx, control characters end a line.
_UNSAFE = re.compile(r"[\"'\\;{}#$\x00-\x1f\x7f]")
# a config is written as UTF-8 text: a name's byte that is not UTF-8 cannot be in it
_NOT_UTF8 = re.compile("[\udc80-\udcff]")


def config_value(value: str | Path, what: str) -> str:
    """``value`` (a path) as it may be written, quoted, into a server's config; a
    one-line TestbedError naming it if it holds a character that could break out."""
    text = str(value)
    m = _UNSAFE.search(text) or _NOT_UTF8.search(text)
    if m is not None:
        bad = m.group()
        if _NOT_UTF8.fullmatch(bad):  # a byte os.fsdecode kept as a surrogate
            bad = f"the byte {os.fsencode(bad)!r} (not UTF-8)"
        else:
            bad = repr(bad)
        raise TestbedError(
            f"{what} {text!r} holds {bad}, which cannot be written into a server "
            "config safely; use a path without it"
        )
    return text


def forgeable(path: str | Path) -> str | None:
    """Why another user could have written ``path`` (a state file ``down`` would act on),
    or None if only this user or root could: it is theirs and no one else may write it,
    nor replace it in its folder (one no one else may write, or a sticky one).

    A state names PIDs with their start times and programs, all of which anyone can
    read in /proc: a file another user wrote could name any process on the machine."""
    me = os.geteuid()
    p = Path(os.path.realpath(path))
    try:
        st, folder = os.stat(p), os.stat(p.parent)
    except OSError as exc:
        return f"cannot check it ({exc.strerror})"
    if st.st_uid not in (0, me) or st.st_mode & 0o022:
        return f"it is owned by UID {st.st_uid} or writable by others"
    if folder.st_uid not in (0, me) or (folder.st_mode & 0o022 and not folder.st_mode & 0o1000):
        return f"its folder {p.parent} is UID {folder.st_uid}'s or writable by others"
    return None


def docroot_writers(docroot: Path, user: ServerUser | None) -> tuple[Path, str] | None:
    """The first folder, the document root, one on its path or a folder or file inside
    it, that a user other than root and the servers' user (this user, when not root) may
    change, and how: its owner, every user, or a group with other members. None if there
    is none.

    Any such user could put pages there that the server serves, and PHP that it runs as
    the servers' user (a folder ``app/`` open to all was as good as a root open to all).
    Above the root a folder open to all but sticky (``/tmp``) is not one: others may add
    to it, not rename the root away; the root itself, and what is inside it, it is. Of
    what is inside, the first :data:`MAX_LOOKED_AT` entries are looked at.
    """
    allowed = {0, user.uid if user is not None else os.geteuid()}
    members = functools.cache(lambda gid: _group_members(gid))
    root = Path(os.path.realpath(docroot))
    for d in (root, *root.parents):
        how = _changed_by_others(os.stat(d), allowed, d != root, members)
        if how is not None:
            return d, how
    return _writer_inside(root, allowed, members)


# Entries inside a document root looked at for other writers: a recorded site's root
# holds a file per path, tens of thousands; the rest of a larger one is not looked at.
MAX_LOOKED_AT = 200_000


def _writer_inside(
    root: Path, allowed: set[int], members: Callable[[int], set[int]]
) -> tuple[Path, str] | None:
    looked = 0
    for top, dirs, names in os.walk(root):
        for name in (*dirs, *names):
            path = os.path.join(top, name)
            try:
                st = os.lstat(path)
            except OSError:
                continue  # gone since the listing
            if stat.S_ISLNK(st.st_mode):
                continue  # its own mode means nothing; its folder's says who may swap it
            how = _changed_by_others(st, allowed, False, members)
            if how is not None:
                return Path(path), how
            looked += 1
            if looked >= MAX_LOOKED_AT:
                return None
    return None


def _changed_by_others(
    st: os.stat_result, allowed: set[int], above: bool, members: Callable[[int], set[int]]
) -> str | None:
    """How a user not in ``allowed`` may change the file ``st`` is of, or None; a sticky
    folder ``above`` the root is not changed by their adding to it."""
    sticky = above and st.st_mode & stat.S_ISVTX
    if st.st_uid not in allowed:
        return f"owned by {user_name(st.st_uid)}"
    if st.st_mode & 0o002 and not sticky:
        return f"writable by every user (mode {stat.S_IMODE(st.st_mode):04o})"
    if st.st_mode & 0o020 and not sticky and members(st.st_gid) - allowed:
        return f"writable by group {_group_name(st.st_gid)}, which has other members"
    return None


def _group_members(gid: int) -> set[int]:
    """UIDs of the users in group ``gid``: listed in it, or with it as their own."""
    try:
        names = set(grp.getgrgid(gid).gr_mem)
    except KeyError:
        names = set()
    uids = set()
    for pw in pwd.getpwall():
        if pw.pw_gid == gid or pw.pw_name in names:
            uids.add(pw.pw_uid)
    return uids


def user_name(uid: int) -> str:
    """``name (UID n)``, or ``UID n`` for a UID no account has."""
    try:
        return f"{pwd.getpwuid(uid).pw_name} (UID {uid})"
    except KeyError:
        return f"UID {uid}"


def _group_name(gid: int) -> str:
    try:
        return grp.getgrgid(gid).gr_name
    except KeyError:
        return str(gid)


def check_reachable(docroot: Path, user: ServerUser | None) -> None:
    """The server user must be able to read the document root: say which folder stops it."""
    if user is not None:
        _check_access(docroot, user, 0o5, f"document root {docroot}")


def check_run_dir_reachable(base: Path, user: ServerUser | None) -> None:
    """The server user must pass through to shrink's private folder, where its configs,
    logs and sockets are: a ``SHRINK_RUN_DIR`` below a 0700 folder ended in the server's
    own "failed (13: Permission denied)" on its config, naming nothing to change."""
    if user is not None:
        _check_access(base, user, 0o1, f"shrink's private folder {base} (SHRINK_RUN_DIR)")


class UpLock:
    """An exclusive lock on one state file while ``testbed up`` runs: a second ``up``
    with the same ``--state`` fails at once, naming the PID that holds it."""

    def __init__(self, base: Path, state_path: Path) -> None:
        key = hashlib.sha1(str(state_path).encode()).hexdigest()[:16]
        self.path = base / f"up-{key}.lock"
        self.state_path = state_path
        self.fd: int | None = None

    def __enter__(self) -> UpLock:
        while True:
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o600)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                holder = os.pread(fd, 32, 0).decode(errors="replace").strip() or "unknown"
                os.close(fd)
                raise TestbedError(
                    f"{self.state_path}: another `testbed up` (PID {holder}) is starting a "
                    "testbed with this state file; wait for it, or give another --state"
                ) from None
            # The holder before us may have removed the file after we opened it: then
            # our lock is on a file no one else will find; take the one at the path.
            try:
                if os.stat(self.path, follow_symlinks=False).st_ino == os.fstat(fd).st_ino:
                    break
            except FileNotFoundError:
                pass
            os.close(fd)
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        self.fd = fd
        return self

    def __exit__(self, *exc: object) -> None:
        if self.fd is not None:
            with contextlib.suppress(OSError):
                os.unlink(self.path)  # while still held: see __enter__
            os.close(self.fd)
            self.fd = None
