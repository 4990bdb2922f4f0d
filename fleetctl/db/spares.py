"""The pool of hot spares as the database records it (fleetctl.jobs.spares decides it)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from sqlalchemy.exc import IntegrityError
from sqlmodel import Session, col, delete, select

from fleetctl.db.models import Node, Spare

if TYPE_CHECKING:
    from sqlalchemy.engine import Engine


def held(engine: Engine) -> dict[str, str]:
    """Every spare -> the island it is held for."""
    with Session(engine) as session:
        return dict(session.exec(select(Spare.node_name, Spare.island)).all())


def record_pool(engine: Engine, island: str, nodes: Sequence[str]) -> None:
    """The island's spares are now exactly `nodes`; writing the same pool again changes nothing.
    Two refills may write at once: the one that loses the insert race writes again over the
    winner's rows (each writes a whole pool)."""
    try:
        _record_pool(engine, island, nodes)
    except IntegrityError:
        _record_pool(engine, island, nodes)


def _record_pool(engine: Engine, island: str, nodes: Sequence[str]) -> None:
    with Session(engine) as session:
        current = set(session.exec(select(Spare.node_name).where(Spare.island == island)))
        gone = current - set(nodes)
        if gone:
            session.exec(delete(Spare).where(col(Spare.node_name).in_(gone)))
        for name in sorted(set(nodes) - current):
            session.merge(Spare(node_name=name, island=island))
        session.commit()


def pool_facts(engine: Engine) -> list[tuple[str, str, str, str]]:
    """(name, island, state, scheduler) of every node."""
    with Session(engine) as session:
        rows = session.exec(select(Node.name, Node.island, Node.state, Node.scheduler))
        return [(name, island, state, scheduler) for name, island, state, scheduler in rows]
