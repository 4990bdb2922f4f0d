"""Jobs on a simulated fleet written straight into the database, a Slurm inventory, and the
Slurm prolog's wrapper: what the job, scheduler and lifecycle tests share."""

from __future__ import annotations

import asyncio
import os
import shlex
import sys
import time
from importlib import resources
from pathlib import Path

from sqlmodel import Session

from fleetctl.db import queries
from fleetctl.db.models import Node
from fleetctl.inventory.parse import parse_inventory


def sim_fleet(engine, names, state: str = "production", scheduler: str = "sim") -> list[str]:
    """Nodes already in `state` (as if their lifecycle workflows had brought them there)."""
    with Session(engine) as session:
        for name in names:
            session.add(Node(name=name, address=f"sim://{name}", profile="h100-sxm", scheduler=scheduler, state=state))
        session.commit()
    return list(names)


def slurm_inventory(names) -> str:
    """The inventory of Slurm test-cluster nodes: one rack, simulated hardware behind each."""
    return "nodes:\n" + "".join(
        f"  - {{name: {n}, address: sim://{n}, profile: h100-sxm, rack: r1, scheduler: slurm}}\n" for n in names
    )


def import_slurm_nodes(engine, names) -> list[str]:
    """The Slurm test cluster's nodes (or some of them) in the inventory, in state new."""
    queries.upsert_nodes(engine, parse_inventory(slurm_inventory(names)))
    return list(names)


async def until(predicate, timeout_s: float, what: str):
    """predicate()'s first true value, polled until timeout_s (the caller's bound)."""
    deadline = time.monotonic() + timeout_s
    while not (value := predicate()):
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.1)
    return value


# fleetctl's Slurm Prolog and Epilog, one script (slurmd's SLURM_SCRIPT_CONTEXT picks which).
GATE_SCRIPT = Path(str(resources.files("fleetctl") / "prolog" / "slurm-prolog.sh"))


def slurm_gate_wrapper(path: Path, settings, timeout_s: int) -> Path:
    """What a site writes for Prolog= and Epilog=: fleetctl's settings (slurmd passes the
    script almost no environment), then the shipped script. Every value quoted for the shell."""
    env = {
        "FLEETCTL": str(Path(sys.executable).with_name("fleetctl")),
        "FLEETCTL_DB_URL": settings.db_url,
        "TEMPORAL_ADDRESS": settings.temporal_address,
        "FLEETCTL_TASK_QUEUE": settings.task_queue,
        "FLEETCTL_FLEET": settings.fleet,
        "PATH": os.environ["PATH"],
        "FLEETCTL_PROLOG_TIMEOUT_S": str(timeout_s),
    }
    path.write_text(
        "#!/bin/sh\n"
        + "".join(f"export {k}={shlex.quote(v)}\n" for k, v in env.items())
        + f"exec /bin/sh {shlex.quote(str(GATE_SCRIPT))}\n"
    )
    path.chmod(0o755)
    return path
