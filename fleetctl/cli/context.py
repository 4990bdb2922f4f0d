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
