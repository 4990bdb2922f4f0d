"""`fleetctl topology ...`: the fabric the inventory describes, in the schedulers' terms."""

from __future__ import annotations

from enum import Enum
from pathlib import Path
from typing import TYPE_CHECKING

import typer

from fleetctl.cli.output import EXIT_OPERATIONAL, EXIT_USAGE, fail
from fleetctl.text import plural, printable

if TYPE_CHECKING:
    from fleetctl.inventory.fabric import FabricView
    from fleetctl.inventory.parse import NodeSpec

app = typer.Typer(
    help="Topology: Slurm's topology.conf and node labels from the inventory or the fabric (ibnetdiscover, nvidia-smi).",
    no_args_is_help=True,
)


@app.command("slurm-conf")
def slurm_conf(
    file: Path = typer.Argument(..., help="YAML inventory with a top-level 'nodes:' list"),
    root: str = typer.Option("spine", "--root", help="the switch that joins the islands when there are several"),
    out: Path | None = typer.Option(None, "--out", help="write here (replaced whole) instead of stdout"),
) -> None:
    """Print a topology.conf (TopologyPlugin=topology/tree) of the inventory's Slurm nodes:
    a line per leaf switch, per island over its leaves, and a root over the islands."""
    from fleetctl.inventory.names import scheduler_members
    from fleetctl.inventory.parse import load_inventory
    from fleetctl.inventory.topology import TopologyError, slurm_topology_conf

    specs = load_inventory(file)
    try:
        text = slurm_topology_conf([s for s in specs if "slurm" in scheduler_members(s.scheduler)], root)
    except TopologyError as exc:
        fail(f"{file}: {exc}", EXIT_USAGE)
    if out is None:
        typer.echo(text, nl=False)
        return
    # Whole or not at all: slurmctld may read the file while it is being written.
    partial = out.with_name(out.name + ".partial")
    partial.write_text(text)
    partial.replace(out)
    typer.echo(f"{out}: {text.count('SwitchName=')} switches")


class FabricFormat(str, Enum):
    report = "report"  # where the inventory disagrees with the fabric
    tree = "tree"  # topology.conf for topology/tree
    block = "block"  # topology.conf for topology/block (NVLink domains)
    labels = "labels"  # Kubernetes node labels, as JSON


@app.command("fabric")
def fabric(
    file: Path = typer.Argument(..., help="YAML inventory with a top-level 'nodes:' list"),
    ibnetdiscover: Path | None = typer.Option(None, "--ibnetdiscover", help="ibnetdiscover's output (a file)"),
    nvidia_smi: Path | None = typer.Option(
        None, "--nvidia-smi", help="a directory of `nvidia-smi -q` outputs, one file per node named after it"
    ),
    form: FabricFormat = typer.Option(FabricFormat.report, "--format", help="report, tree, block or labels"),
    root: str = typer.Option("spine", "--root", help="the switch that joins the islands when there are several"),
) -> None:
    """Read the fabric (ibnetdiscover, nvidia-smi's NVLink fabric ids) and say where the inventory disagrees.

    --format tree or block writes Slurm's topology.conf from the fabric (topology/tree: leaves
    and islands; topology/block: one block per NVLink domain, Slurm 23.11 and later), labels the
    Kubernetes node labels. The report exits 1 while the inventory disagrees with the fabric."""
    import json

    from fleetctl.inventory.fabric import FabricError
    from fleetctl.inventory.names import scheduler_members
    from fleetctl.inventory.parse import load_inventory
    from fleetctl.inventory.topology import TopologyError, slurm_topology_conf

    if ibnetdiscover is None and nvidia_smi is None:
        fail("give --ibnetdiscover FILE, --nvidia-smi DIR or both: no fabric to read", EXIT_USAGE)
    specs = load_inventory(file)
    try:
        view, domains, problems = _read_fabric(specs, ibnetdiscover, nvidia_smi)
        if form is FabricFormat.tree:
            slurm = {s.name for s in specs if "slurm" in scheduler_members(s.scheduler)}
            typer.echo(slurm_topology_conf([p for p in view.placed if p.name in slurm], root), nl=False)
        elif form is FabricFormat.block:
            typer.echo(_block_conf(specs, domains), nl=False)
        elif form is FabricFormat.labels:
            from fleetctl.inventory.fabric import kubernetes_labels

            typer.echo(json.dumps(kubernetes_labels(view.placed, domains), indent=2))
        else:
            _report(view, domains, problems)
    except (FabricError, TopologyError, OSError) as exc:
        fail(f"{exc}", EXIT_USAGE)


def _read_fabric(
    specs: list[NodeSpec], ibnetdiscover: Path | None, nvidia_smi: Path | None
) -> tuple[FabricView, dict[str, str], list[str]]:
    from fleetctl.inventory.fabric import (
        FabricError,
        FabricView,
        compare_with_inventory,
        domain_disagreements,
        nvlink_domains,
        parse_ibnetdiscover,
    )

    view = FabricView()
    if ibnetdiscover is not None:
        view = compare_with_inventory(parse_ibnetdiscover(ibnetdiscover.read_text(errors="replace")), specs)
    domains: dict[str, str] = {}
    problems: list[str] = []
    if nvidia_smi is not None:
        if not nvidia_smi.is_dir():
            raise FabricError(f"{nvidia_smi}: not a directory of nvidia-smi -q outputs")
        known = {s.name for s in specs}
        outputs = {p.stem: p.read_text(errors="replace") for p in sorted(nvidia_smi.iterdir()) if p.stem in known}
        domains, problems = nvlink_domains(outputs)
        view.disagreements += domain_disagreements(domains, {s.name: s.nvlink_domain for s in specs})
    return view, domains, problems


def _block_conf(specs: list[NodeSpec], domains: dict[str, str]) -> str:
    """Blocks named after the inventory's nvlink_domain where its nodes agree on one."""
    from fleetctl.inventory.fabric import slurm_block_conf

    said: dict[str, set[str]] = {}
    for s in specs:
        if s.name in domains and s.nvlink_domain:
            said.setdefault(domains[s.name], set()).add(s.nvlink_domain)
    names = {domain: next(iter(named)) for domain, named in said.items() if len(named) == 1}
    return slurm_block_conf(domains, names)


def _report(view: FabricView, domains: dict[str, str], problems: list[str]) -> None:
    from fleetctl.inventory.hostlist import compress

    typer.echo(
        f"{plural(len(view.placed), 'inventory node')} in the fabric, "
        f"{plural(len(set(domains.values())), 'NVLink domain')}"
        + (f"; {view.unnamed_hcas} HCAs name no host" if view.unnamed_hcas else "")
    )
    if view.not_in_fabric:
        typer.echo(f"not in the fabric: {compress(view.not_in_fabric)}")
    if view.not_in_inventory:
        typer.echo(f"in the fabric, not in the inventory: {len(view.not_in_inventory)} hosts")
    for line in [*problems, *view.disagreements]:
        typer.echo(printable(line, keep_newlines=False))
    if view.disagreements:
        raise typer.Exit(EXIT_OPERATIONAL)
