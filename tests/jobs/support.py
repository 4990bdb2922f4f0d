"""Helpers for the job tests: a simulated fleet written straight into the database."""

from __future__ import annotations

import asyncio
import time

from sqlmodel import Session

from fleetctl.db.models import Node


def sim_fleet(engine, names, state: str = "production", scheduler: str = "sim") -> list[str]:
    """Nodes already in `state` (as if their lifecycle workflows had brought them there)."""
    with Session(engine) as session:
        for name in names:
            session.add(Node(name=name, address=f"sim://{name}", profile="h100-sxm", scheduler=scheduler, state=state))
        session.commit()
    return list(names)


async def until(predicate, timeout_s: float, what: str):
    """predicate()'s first true value, polled until timeout_s (the caller's bound)."""
    deadline = time.monotonic() + timeout_s
    while not (value := predicate()):
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.1)
    return value
