"""A user's server recipe: a TOML file of command templates.

Any server that can be started from a command line (an app server, a JVM, a Go
binary) can be measured::

    # python-http.toml
    name = "python-http"
    commands = [
      ["python3", "-m", "http.server", "--bind", "{address}", "--directory", "{docroot}", "{port}"],
    ]
    health_url = "http://{address}:{port}/"
    stop_signal = "SIGINT"
    versions = { python = ["python3", "--version"] }

Keys: ``commands`` (required; a list of argument lists, started in order, or
``command``, one argument list), ``name`` (default: the file's stem),
``health_url`` (default ``http://{address}:{port}/``; any 2xx or 3xx answer is
healthy), ``stop_signal`` (default SIGTERM), ``versions`` (a table of name ->
argument list whose first output line is that program's version; run, like the
commands, as the server user),
``start_timeout`` (seconds, default 15), ``workers_per_core`` (default 1) and
``env`` (a table of extra environment variables, set over the environment every
server gets: as root, not root's, :func:`shrink.testbed.private.server_env`).

Templates: ``{port}``, ``{address}``, ``{cpus}`` (a CPU list such as ``0-1``),
``{workers}`` (cores of the replica times ``workers_per_core``), ``{docroot}``
and ``{run_dir}`` (the replica's own directory, for configs, logs and sockets,
writable by the server); ``{{`` and ``}}`` are literal braces. Commands run as
argument lists, never through a shell, pinned to the replica's CPUs and in its
cgroup, and as root's unprivileged server user (:mod:`shrink.testbed.private`);
everything they fork is found through /proc and the cgroup, and stopped by PID.
``health_url`` must name a loopback host.
"""

from __future__ import annotations

import os
import shutil
import signal
import string
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from shrink import files
from shrink.errors import RecipeError, TestbedError, TraceFormatError
from shrink.testbed.health import probe
from shrink.testbed.private import can_run, server_user
from shrink.testbed.recipe import (
    ReplicaContext,
    Started,
    first_line,
    replica_pids,
    signal_number,
    stop_replica,
)
from shrink.testbed.state import ReplicaState
from shrink.topology import format_cpulist
from shrink.wire import loopback_url_host

__all__ = ["PLACEHOLDERS", "CommandRecipe"]

PLACEHOLDERS = ("port", "address", "cpus", "workers", "docroot", "run_dir")
_KEYS = {
    "name",
    "command",
    "commands",
    "health_url",
    "stop_signal",
    "versions",
    "start_timeout",
    "workers_per_core",
    "env",
}


# Bounds a recipe's numbers must keep: an hour to start, and workers a core could run.
MAX_START_TIMEOUT = 3600.0
MAX_WORKERS_PER_CORE = 1024


def _brief(value: Any) -> str:
    """A recipe value as shown in a message, cut short (a 5,000-digit number too)."""
    try:
        text = repr(value)
    except ValueError:  # an int past Python's digit limit for str()
        return "a number too long to show"
    return text if len(text) <= 40 else text[:37] + "..."


@dataclass
class CommandRecipe:
    """A recipe read from a TOML file; ``source`` is the file's path."""

    name: str
    source: str
    commands: list[list[str]]
    health_url: str = "http://{address}:{port}/"
    stop_signal: int = signal.SIGTERM
    version_commands: dict[str, list[str]] = field(default_factory=dict)
    start_timeout: float = 15.0
    workers_per_core: int = 1
    env: dict[str, str] = field(default_factory=dict)

    @classmethod
    def read(cls, path: str | Path) -> CommandRecipe:
        """Read and check a recipe file; errors name the file and the key."""
        p = Path(path)
        src = str(p)
        try:
            # The guarded reader: a size bound, a bad byte or nesting too deep for the
            # parser is one line naming the file, not a crash.
            d = files.read_toml(p, what="recipe file")
        except TraceFormatError as exc:
            raise RecipeError(exc.reason, recipe=src) from None
        return cls.from_dict(d, source=src, base=p.resolve().parent)

    @classmethod
    def from_dict(
        cls, d: dict[str, Any], *, source: str, base: Path | None = None
    ) -> CommandRecipe:
        unknown = sorted(set(d) - _KEYS)
        if unknown:
            raise RecipeError(
                f"unknown key(s) {unknown}; known: {sorted(_KEYS)}", recipe=source, field=unknown[0]
            )
        if "command" in d and "commands" in d:
            raise RecipeError("give 'command' or 'commands', not both", recipe=source)
        raw = [d["command"]] if "command" in d else d.get("commands")
        key = "command" if "command" in d else "commands"
        if not isinstance(raw, list) or not raw:
            raise RecipeError(
                "missing or empty: give a list of argument lists, e.g. "
                '[["python3", "-m", "http.server", "{port}"]]',
                recipe=source,
                field="commands",
            )
        commands = [_argv(c, source, f"{key}[{i}]", base) for i, c in enumerate(raw)]
        health_url = _text(d.get("health_url", "http://{address}:{port}/"), source, "health_url")
        _check_templates(health_url, source, "health_url", allowed=("address", "port"))
        # Checked as it will be filled in (a replica's address is loopback): parsed
        # only, so a recipe cannot point shrink's probes at another machine.
        why = loopback_url_host(health_url.format(address="127.0.0.1", port=80))
        if why is not None:
            raise RecipeError(f"{health_url!r} {why}", recipe=source, field="health_url")
        versions = d.get("versions", {})
        if not isinstance(versions, dict):
            raise RecipeError("must be a table: name = [argv]", recipe=source, field="versions")
        for k in versions:
            _text(k, source, "versions")
        timeout = d.get("start_timeout", 15.0)
        per_core = d.get("workers_per_core", 1)
        if (
            not isinstance(timeout, int | float)
            or isinstance(timeout, bool)
            or not 0 < timeout <= MAX_START_TIMEOUT
        ):
            raise RecipeError(f"== {_brief(timeout)}, must be seconds > 0 (at most "
                              f"{MAX_START_TIMEOUT:g})", recipe=source,
                              field="start_timeout")  # fmt: skip
        if (
            not isinstance(per_core, int)
            or isinstance(per_core, bool)
            or not 1 <= per_core <= MAX_WORKERS_PER_CORE
        ):
            raise RecipeError(f"== {_brief(per_core)}, must be an integer >= 1 (at most "
                              f"{MAX_WORKERS_PER_CORE})", recipe=source,
                              field="workers_per_core")  # fmt: skip
        env = d.get("env", {})
        if not isinstance(env, dict) or not all(isinstance(v, str) for v in env.values()):
            raise RecipeError("must be a table of strings", recipe=source, field="env")
        for k, v in env.items():
            # "A=B", "" or a NUL: the start failed ("illegal environment variable name").
            if not k or "=" in k or "\0" in k or "\0" in v:
                raise RecipeError(
                    f"{k!r} = {v!r}: a name must be non-empty, without '=' or NUL, and a "
                    "value without NUL",
                    recipe=source,
                    field="env",
                )
        return cls(
            name=_text(d.get("name", Path(source).stem), source, "name"),
            source=source,
            commands=commands,
            health_url=health_url,
            stop_signal=signal_number(d.get("stop_signal", "SIGTERM"), recipe=source),
            version_commands={
                str(k): _argv(v, source, f"versions.{k}", base) for k, v in versions.items()
            },
            start_timeout=float(timeout),
            workers_per_core=per_core,
            env={str(k): v for k, v in env.items()},
        )

    def versions(self) -> dict[str, str]:
        # A recipe file's commands are the user's, not shrink's: as root they run as the
        # server user, the version commands as much as the servers.
        user = server_user()
        out = {"recipe": self.name}
        for key, argv in self.version_commands.items():
            prog = self._program(argv[0], f"versions.{key}")
            if not can_run(prog, user):
                raise RecipeError(f"program {prog} cannot be run by {user.name if user else ''}, "
                                  "the unprivileged user the servers run as", recipe=self.source,
                                  field=f"versions.{key}")  # fmt: skip
            out[key] = first_line([prog, *argv[1:]], self.source, user)
        return out

    def _program(self, name: str, where: str) -> str:
        path = shutil.which(name)
        if path is None:
            raise RecipeError(f"program {name!r} not found (not on PATH, or not executable)",
                              recipe=self.source, field=where)  # fmt: skip
        return path

    def values(self, ctx: ReplicaContext) -> dict[str, str]:
        """What the templates are filled with for one replica."""
        r = ctx.replica
        return {
            "port": str(r.port),
            "address": r.address,
            "cpus": format_cpulist(r.cpus),
            "workers": str(len(r.cpus) * self.workers_per_core),
            "docroot": str(ctx.docroot),
            "run_dir": str(ctx.sock_dir),  # the server user's own folder: it may write there
        }

    def start(self, ctx: ReplicaContext) -> Started:
        # Every program is found before anything starts: nothing is left half-started.
        vals = self.values(ctx)
        argvs = [[a.format(**vals) for a in argv] for argv in self.commands]
        for i, argv in enumerate(argvs):
            argv[0] = self._program(argv[0], f"commands[{i}]")
            if not can_run(argv[0], ctx.user):
                raise RecipeError(
                    f"program {argv[0]} cannot be run by {ctx.user.name if ctx.user else ''}, "
                    "the unprivileged user the servers run as (a folder on its way is "
                    "private); install it where that user can run it",
                    recipe=self.source,
                    field=f"commands[{i}]",
                )
        env = dict(self.env) or None  # over the environment spawn gives every server
        masters = []
        for i, argv in enumerate(argvs):
            try:
                masters.append(ctx.spawn(argv, f"command{i}.log", env=env).pid)
            except TestbedError as exc:
                raise TestbedError(f"commands[{i}]: {exc}") from None
        return Started(
            masters=masters,
            processes={"server": masters},
            pinned={p: list(ctx.replica.cpus) for p in masters},
            config=self.source,
            errorlog=str(ctx.run_dir / "command0.log"),
        )

    def health(self, address: str, port: int) -> str | None:
        host = f"[{address}]" if ":" in address else address
        # Only address and port are known here; the file's check allows no others in it.
        target = self.health_url.format(address=host, port=port)
        why = loopback_url_host(target)
        return f"{target}: {why}, not probed" if why is not None else probe(target)

    def pids(self, replica: ReplicaState) -> list[int]:
        return replica_pids(replica)

    def stop(self, replica: ReplicaState) -> list[int]:
        return stop_replica(replica, self.stop_signal)


def _text(v: Any, source: str, key: str) -> str:
    if not isinstance(v, str) or not v:
        raise RecipeError(f"== {v!r}, must be a non-empty string", recipe=source, field=key)
    if not v.isprintable():
        # A name is printed (testbed up, status) and kept in every result file: an
        # escape or a CR/LF in it rewrote the terminal.
        raise RecipeError(f"== {v!r}, must be printable (no control characters)",
                          recipe=source, field=key)  # fmt: skip
    return v


def _check_templates(
    text: str, source: str, key: str, allowed: tuple[str, ...] = PLACEHOLDERS
) -> None:
    try:
        fields = [(f, spec, conv) for _, f, spec, conv in string.Formatter().parse(text)]
    except ValueError as exc:
        raise RecipeError(f"{text!r}: {exc} (write {{{{ for a brace)", recipe=source,
                          field=key) from None  # fmt: skip
    names = [f for f, _, _ in fields if f is not None]
    for f, spec, conv in fields:
        if f is not None and (spec or conv):
            # {port:x} or {port:>99999999999999999999} failed only when the testbed
            # started (exit 70), and {port:>99999999} filled a 100 MB argument.
            raise RecipeError(
                f"placeholder {{{f}}} in {text!r} takes no format spec or conversion",
                recipe=source,
                field=key,
            )
    if "\0" in text:
        # The kernel takes no NUL in an argument or the environment: the start failed.
        raise RecipeError(f"{text!r} holds a NUL character", recipe=source, field=key)
    bad = [n for n in names if n not in allowed]
    if bad:
        raise RecipeError(
            f"unknown placeholder {{{bad[0]}}} in {text!r}; known here: "
            + " ".join(f"{{{p}}}" for p in allowed),
            recipe=source,
            field=key,
        )


def _argv(v: Any, source: str, key: str, base: Path | None) -> list[str]:
    if not isinstance(v, list) or not v or not all(isinstance(a, str) for a in v):
        raise RecipeError(
            f"== {v!r}, must be a non-empty list of strings (an argument list; no shell)",
            recipe=source,
            field=key,
        )
    for a in v:
        _check_templates(a, source, key)
    prog = v[0]
    # A relative path to a program is relative to the recipe file, not to where shrink runs.
    if base is not None and os.sep in prog and not os.path.isabs(prog):
        prog = str(base / prog)
    return [prog, *v[1:]]
