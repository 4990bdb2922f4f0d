"""The hot spare pools refilled from activities (fleetctl.jobs.spares_sync): when a node returns to
production, when a spare leaves it, when a restart has taken one. Best effort: a pool that
cannot be refilled now is refilled at the next of these, or by `fleetctl spares fill`; the
node's own step (its resume, its drain, the restart) never fails for it."""

from __future__ import annotations

import threading

from sqlalchemy.engine import Engine
from sqlalchemy.exc import SQLAlchemyError
from temporalio import activity
from temporalio.exceptions import ApplicationError

from fleetctl.config import Settings
from fleetctl.db import spares as store
from fleetctl.jobs import spares_sync
from fleetctl.schedulers.base import SchedulerError
from fleetctl.workflows.activities.schedulers import SchedulerRegistry

# Refills run in activity threads, several at once when nodes enter production together. Each
# reads the pool, then writes its choice whole: two at once both saw an empty pool and the
# later one replaced the earlier's spare (and its Slurm reservation) with another node, so a
# job could start on the node that had just been the spare. One at a time in a worker, each
# reads what the one before it chose. (Workers in other processes can still interleave.)
_ONE_REFILL_AT_A_TIME = threading.Lock()


def refill_spares(engine: Engine, settings: Settings, schedulers: SchedulerRegistry, why: str, island: str) -> None:
    """Refill the pool of `island` (nothing for a node in no island)."""
    if not island or (settings.spares_per_island == 0 and island not in store.held(engine).values()):
        return
    try:
        with _ONE_REFILL_AT_A_TIME:
            result = spares_sync.fill(engine, settings.spares_per_island, schedulers.get, islands={island})
    except (SchedulerError, SQLAlchemyError, ApplicationError) as exc:  # the last: a scheduler not set up
        activity.logger.warning("spares not refilled (%s): %s", why, exc)
        return
    for where, error in result.errors.items():
        activity.logger.warning("spares of %s not refilled (%s): %s", where, why, error)
    if result.added or result.removed:
        activity.logger.info("spares (%s): held %s, released %s", why, result.added, result.removed)
