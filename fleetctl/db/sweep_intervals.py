"""The active-check sweep schedules' intervals as the database records them (migration 0014):
written by `fleetctl schedule` (and the demo) whenever it changes a schedule in Temporal,
rewritten whole by `fleetctl schedule list` from what Temporal holds (a schedule changed with
the `temporal` CLI is seen from then), read by `node list` and `node show`."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from sqlalchemy import func
from sqlmodel import Session, col, delete, select

from fleetctl.db.models import SweepInterval, utcnow

if TYPE_CHECKING:
    from sqlalchemy.engine import Engine


@dataclass(frozen=True)
class SweepSchedule:
    """One active-check sweep schedule: its id, the fleet it sweeps, how often, paused or not."""

    schedule_id: str
    fleet: str
    every_s: float
    paused: bool = False


def record(engine: Engine, sweep: SweepSchedule) -> None:
    """The schedule `sweep.schedule_id` is now `sweep` (created or replaced)."""
    with Session(engine) as session:
        session.merge(
            SweepInterval(
                schedule_id=sweep.schedule_id,
                fleet=sweep.fleet,
                every_s=sweep.every_s,
                paused=sweep.paused,
                recorded_at=utcnow(),
            )
        )
        session.commit()


def set_paused(engine: Engine, schedule_id: str, paused: bool) -> None:
    """The schedule was paused or unpaused; nothing when it is no recorded sweep."""
    with Session(engine) as session:
        row = session.get(SweepInterval, schedule_id)
        if row is not None:
            row.paused, row.recorded_at = paused, utcnow()
            session.add(row)
            session.commit()


def forget(engine: Engine, schedule_id: str) -> None:
    """The schedule was deleted, or replaced by one that is no active-check sweep."""
    with Session(engine) as session:
        session.exec(delete(SweepInterval).where(col(SweepInterval.schedule_id) == schedule_id))
        session.commit()


def replace_all(engine: Engine, sweeps: Iterable[SweepSchedule]) -> None:
    """Temporal's active-check sweep schedules are exactly `sweeps` (read from it whole)."""
    sweeps = list(sweeps)
    with Session(engine) as session:
        session.exec(delete(SweepInterval))
        now = utcnow()
        for s in sweeps:
            session.add(
                SweepInterval(
                    schedule_id=s.schedule_id, fleet=s.fleet, every_s=s.every_s, paused=s.paused, recorded_at=now
                )
            )
        session.commit()


def sweep_every_s(engine: Engine, fleet: str) -> float | None:
    """How often `fleet`'s evidence is refreshed: the shortest interval of its unpaused sweep
    schedules; None when none is recorded (then nothing says how old is too old). One query."""
    with Session(engine) as session:
        return session.exec(
            select(func.min(SweepInterval.every_s)).where(
                SweepInterval.fleet == fleet, col(SweepInterval.paused).is_(False)
            )
        ).one()


def sweep_every_s_by_fleet(engine: Engine) -> dict[str, float]:
    """`sweep_every_s` of every fleet with an unpaused sweep schedule, in one query (the exporter's)."""
    with Session(engine) as session:
        return dict(
            session.exec(
                select(SweepInterval.fleet, func.min(SweepInterval.every_s))
                .where(col(SweepInterval.paused).is_(False))
                .group_by(SweepInterval.fleet)
            ).all()
        )
