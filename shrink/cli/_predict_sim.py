"""predict's check of the options the simulator does not take (``--target sim:SPEC``)."""

from __future__ import annotations

from pathlib import Path

from shrink.atomic import resolve_path
from shrink.errors import OptionError

__all__ = ["check_sim_options"]


def check_sim_options(
    target: str, *, machine: str, docroot: Path | None, server_cpus: str | None
) -> None:
    """The simulator runs the whole machine of its own spec: a testbed option given with
    it was ignored without a word (the prediction was the spec's, not --machine's).
    The testbed measures this machine's CPUs: a --machine of others is warned of."""
    if target == "testbed":
        from shrink.cli.testbed_cmd import warn_foreign_spec

        warn_foreign_spec(machine)
    if not target.startswith("sim:"):
        return
    spec = target[4:]
    if not spec.strip():
        # Path("") is ".": the error named the working directory as the spec.
        raise OptionError("--target", "'sim:' names no spec; give sim:SPEC.toml")
    if machine != "this" and resolve_path(machine) != Path(spec).resolve():
        raise OptionError(
            "--machine",
            f"{machine} is not the simulated machine: with --target {target} the prediction "
            "is for that spec's machine; leave --machine out, or give the same spec",
        )
    for option, value in (("--server-cpus", server_cpus), ("--docroot", docroot)):
        if value is not None:
            raise OptionError(
                option, f"is the testbed's; --target {target} simulates the spec's every CPU"
            )
