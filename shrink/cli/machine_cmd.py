"""``shrink machine show|write``: this machine's topology, or a spec's, as TOML or JSON."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from shrink.cli._common import cli_errors, echo_json, output_path
from shrink.cli._typed_paths import file_named
from shrink.errors import printable

machine_app = typer.Typer(
    help="Machine topology: discover it, or read a spec.", no_args_is_help=True
)

MachineOpt = Annotated[
    str, typer.Option("--machine", help="'this' (discover from /sys) or a TOML spec file.")
]


@machine_app.command("show")
def show(
    machine: MachineOpt = "this",
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
    toml: Annotated[bool, typer.Option("--toml", help="Print the TOML spec.")] = False,
) -> None:
    """Sockets, cores per socket, SMT threads, last-level cache and NIC queues."""
    from shrink.topology import format_cpulist, load_machine

    with cli_errors(measures=False):
        m = load_machine(machine)
    if as_json:
        echo_json(m.to_dict())
        return
    if toml:
        typer.echo(m.to_toml(), nl=False)
        return
    typer.echo(f"machine          {printable(m.name)}")
    typer.echo(
        f"sockets          {m.sockets} x {m.cores_per_socket} cores x "
        f"{m.threads_per_core} thread(s) = {m.n_cpus} CPUs"
    )
    for s, cpus in enumerate(m.cpus):
        typer.echo(f"socket {s} CPUs    {format_cpulist(cpus)}")
    typer.echo(f"LLC per socket   {m.llc_mib:g} MiB")
    if m.ghz:
        typer.echo(f"clock            {m.ghz:g} GHz")
    typer.echo(f"NIC              {m.nic_ports} port(s) x {m.nic_queues_per_port} queue(s)")
    for k, v in sorted(m.extra.items()):
        typer.echo(f"{k:<16} {v}")


@machine_app.command("write")
def write(
    out: Annotated[
        Path, typer.Argument(readable=False, parser=file_named, help="TOML file to write.")
    ],
    machine: MachineOpt = "this",
) -> None:
    """Write the machine (default: this one, discovered) as a TOML spec."""
    from shrink.topology import load_machine

    with cli_errors(measures=False):
        # Its folder must exist, as every output's must; and it is not the spec read
        # (--machine X.toml written over X.toml lost the spec's comments).
        spec = None if machine == "this" else Path(machine)
        output_path(out, inputs=(spec,), option="OUT")
        load_machine(machine).write_toml(out)
    typer.echo(f"wrote {printable(out)}")


def register(app: typer.Typer) -> None:
    app.add_typer(machine_app, name="machine")
