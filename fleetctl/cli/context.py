"""What every command needs: resolved settings, the database engine, a Temporal client."""

from __future__ import annotations

import asyncio
from typing import Any, Awaitable, TypeVar

import typer

from fleetctl.config import Settings

T = TypeVar("T")


def settings(ctx: typer.Context) -> Settings:
    return ctx.find_root().obj


def engine(ctx: typer.Context):
    from fleetctl.db.engine import get_engine

    return get_engine(settings(ctx).db_url)


def run_async(coro: Awaitable[T]) -> T:
    return asyncio.run(coro)  # type: ignore[arg-type]


async def temporal_client(ctx: typer.Context) -> Any:
    from workflows.client import connect

    return await connect(settings(ctx))


def temporal_read(ctx: typer.Context, ask, what: str, timeout_s: float = 3.0) -> tuple[Any, str | None]:
    """(answer, None) from `ask(client)`, a read a view adds to what the database says; or
    (None, why) when Temporal is unreachable or `what` did not answer in time (a busy worker
    at 1,000 nodes, bench/scale.py), so that the rest of the view still stands."""
    from temporalio.service import RPCError

    from workflows.client import TemporalUnavailable, connect

    async def run():
        return await ask(await connect(settings(ctx), timeout_s=timeout_s))

    try:
        return run_async(run()), None
    except TemporalUnavailable as exc:
        return None, str(exc)
    except RPCError as exc:
        return None, f"{what} did not answer: {exc}"
