"""Helpers for the job tests: a simulated fleet written straight into the database."""

from __future__ import annotations

from sqlmodel import Session

from fleetctl.db.models import Node


def sim_fleet(engine, names, state: str = "production", scheduler: str = "sim") -> list[str]:
    """Nodes already in `state` (as if their lifecycle workflows had brought them there)."""
    with Session(engine) as session:
        for name in names:
            session.add(Node(name=name, address=f"sim://{name}", profile="h100-sxm", scheduler=scheduler, state=state))
        session.commit()
    return list(names)
