"""The hot spare pools refilled from activities (fleetctl.jobs.spares_sync): when a node returns to
production, when a spare leaves it, when a restart has taken one. Best effort: a pool that
cannot be refilled now is refilled at the next of these, or by `fleetctl spares fill`; the
node's own step (its resume, its drain, the restart) never fails for it."""

from __future__ import annotations

from sqlalchemy.exc import SQLAlchemyError
from temporalio import activity
from temporalio.exceptions import ApplicationError

from fleetctl.jobs import spares_sync
from fleetctl.config import Settings
from fleetctl.db import spares as store
from fleetctl.schedulers.base import SchedulerError
from workflows.activities.schedulers import SchedulerRegistry


def refill_spares(engine, settings: Settings, schedulers: SchedulerRegistry, why: str, island: str) -> None:
    """Refill the pool of `island` (nothing for a node in no island)."""
    if not island or (settings.spares_per_island == 0 and island not in store.held(engine).values()):
        return
    try:
        result = spares_sync.fill(engine, settings.spares_per_island, schedulers.get, islands={island})
    except (SchedulerError, SQLAlchemyError, ApplicationError) as exc:  # the last: a scheduler not set up
        activity.logger.warning("spares not refilled (%s): %s", why, exc)
        return
    for where, error in result.errors.items():
        activity.logger.warning("spares of %s not refilled (%s): %s", where, why, error)
    if result.added or result.removed:
        activity.logger.info("spares (%s): held %s, released %s", why, result.added, result.removed)
