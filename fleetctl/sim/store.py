"""Simulated nodes' state in the database, so every process sees it: injected faults
(written by `fleetctl sim inject`, read by the worker's simulated executor, cleared by a
simulated repair), when each node's BMC last rebooted it, and the trays of a node's NVLink
domain (the fleet's own nodes table: what a GB200 tray's IMEX lists)."""

from __future__ import annotations

from sqlalchemy.engine import Engine
from sqlmodel import Session, col, delete, select

from fleetctl.db.models import Node, SimBoot, SimFault
from fleetctl.sim.faults import LEAF_FAULT_KINDS, SimFaultSpec
from fleetctl.sim.node import SimLeaf


def add_fault(
    engine: Engine,
    node: str,
    kind: str,
    gpu: int | None = None,
    not_before: float = 0.0,
    rate_per_hour: float | None = None,
    seed: int = 0,
) -> SimFault:
    with Session(engine) as session:
        fault = SimFault(
            node_name=node, kind=kind, gpu=gpu, not_before=not_before, rate_per_hour=rate_per_hour, seed=seed
        )
        session.add(fault)
        session.commit()
        session.refresh(fault)
        return fault


def clear_faults(engine: Engine, node: str, kind: str | None = None) -> int:
    with Session(engine) as session:
        query = delete(SimFault).where(col(SimFault.node_name) == node)
        if kind:
            query = query.where(col(SimFault.kind) == kind)
        count = session.exec(query).rowcount
        session.commit()
        return count


def faults_for(engine: Engine, node: str) -> list[SimFault]:
    with Session(engine) as session:
        return list(session.exec(select(SimFault).where(SimFault.node_name == node).order_by(col(SimFault.id))))


def _spec(fault: SimFault) -> SimFaultSpec:
    return SimFaultSpec(fault.kind, fault.gpu, fault.not_before, fault.rate_per_hour, fault.seed)


def fault_specs(engine: Engine, node: str) -> list[SimFaultSpec]:
    """The node's stored faults as the simulated executor reads them."""
    return [_spec(f) for f in faults_for(engine, node)]


def leaf_of(engine: Engine, node: str) -> SimLeaf | None:
    """The node's leaf switch (the inventory's `switch`) with the leaf faults injected on any
    node of it; None for a node on no switch (or not in the fleet)."""
    with Session(engine) as session:
        switch = session.exec(select(Node.switch).where(Node.name == node)).first()
        if not switch:
            return None
        query = (
            select(SimFault)
            .join(Node, col(Node.name) == col(SimFault.node_name))
            .where(Node.switch == switch, col(SimFault.kind).in_(LEAF_FAULT_KINDS))
            .order_by(col(SimFault.id))
        )
        return SimLeaf(switch, tuple(_spec(f) for f in session.exec(query)))


def cure(engine: Engine, node: str, kinds: frozenset[str]) -> list[str]:
    """Clear the node's faults of these kinds; returns the kinds it had."""
    cured = sorted({f.kind for f in faults_for(engine, node)} & kinds)
    for kind in cured:
        clear_faults(engine, node, kind)
    return cured


def record_boot(engine: Engine, node: str, at: float) -> None:
    with Session(engine) as session:
        session.merge(SimBoot(node_name=node, booted_at=at))
        session.commit()


def booted_at(engine: Engine, node: str) -> float | None:
    with Session(engine) as session:
        boot = session.get(SimBoot, node)
        return boot.booted_at if boot else None


def domain_members(engine: Engine, node: str) -> list[str]:
    """The nodes of `node`'s multi-node NVLink domain (the inventory's nvlink_domain), itself
    among them, by name; [] for a node in none (or not in the fleet)."""
    with Session(engine) as session:
        domain = session.exec(select(Node.nvlink_domain).where(Node.name == node)).first()
        if not domain:
            return []
        return list(session.exec(select(Node.name).where(Node.nvlink_domain == domain).order_by(Node.name)))
