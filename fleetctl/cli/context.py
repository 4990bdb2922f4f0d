"""What every command needs: resolved settings, the database engine, a Temporal client."""

from __future__ import annotations

import asyncio
import os
import sys
from collections.abc import Awaitable, Callable, Coroutine
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import typer

from fleetctl.config import Settings

if TYPE_CHECKING:
    from sqlalchemy.engine import Engine
    from temporalio.client import Client

    from fleetctl.checks.xid_policy import XidPolicy

T = TypeVar("T")


def settings(ctx: typer.Context) -> Settings:
    """The settings fleetctl's root callback resolved (fleetctl.cli.main.main) for this command."""
    resolved = root_settings(ctx)
    if resolved is None:
        raise RuntimeError("no settings: this command ran without fleetctl's root callback")
    return resolved


def root_settings(ctx: typer.Context) -> Settings | None:
    """The resolved settings, or None when a noun's app runs alone (its tests), without
    fleetctl's root callback to resolve them."""
    resolved = ctx.find_root().obj
    return resolved if isinstance(resolved, Settings) else None


def xid_policy(s: Settings) -> XidPolicy:
    """The site's Xid policy (the xid_policy setting). A file missing or broken: one line,
    exit 2, nothing done; so the processes that send or judge events refuse to start on it."""
    from fleetctl.checks.xid_policy import XidPolicyError
    from fleetctl.cli.output import EXIT_USAGE, fail
    from fleetctl.config import xid_policy as load

    try:
        return load(s)
    except XidPolicyError as exc:
        fail(str(exc), EXIT_USAGE)


def engine(ctx: typer.Context) -> Engine:
    from fleetctl.db.engine import describe, get_engine, require_existing

    s = settings(ctx)
    _note_default(s, "db_url", f"database {describe(s.db_url)}", "FLEETCTL_DB_URL or --db-url")
    if _reads_only(ctx):
        require_existing(s.db_url)
    return get_engine(s.db_url)


def _reads_only(ctx: typer.Context) -> bool:
    """Whether the running command only reads (fleetctl.authz.commands: every command is
    classified there, a test holds it so)."""
    from fleetctl.authz.commands import Kind, rule_of
    from fleetctl.cli.main import ARGV_KEY

    rule = rule_of(" ".join(ctx.command_path.split()[1:]))
    return rule is not None and rule.needs(ctx.meta.get(ARGV_KEY, []))[0] is Kind.READ


def run_async(coro: Coroutine[Any, Any, T]) -> T:
    return asyncio.run(coro)


async def temporal_client(ctx: typer.Context, timeout_s: float = 5.0, acting: bool = True) -> Client:
    """A client of the configured Temporal. `acting` (the command starts or signals workflows):
    warn, once, when no worker polls the task queue, where what it starts would wait unseen."""
    from fleetctl.connections.temporal_client import DEFAULT_ADDRESS, resolve
    from fleetctl.workflows.client import connect, task_queue_unpolled

    s = settings(ctx)
    connection = resolve(s)
    if connection.address == DEFAULT_ADDRESS:  # not from a Temporal profile either
        _note_default(
            s, "temporal_address", f"Temporal {connection.describe()}", "TEMPORAL_ADDRESS or --temporal-address"
        )
    client = await connect(s, timeout_s=timeout_s)
    if acting and (id(s), "unpolled") not in _noted and await task_queue_unpolled(client, s.task_queue):
        _noted.add((id(s), "unpolled"))
        ctx.call_on_close(lambda: _warn_unpolled(s.task_queue))
    return client


def _warn_unpolled(task_queue: str) -> None:
    """Said as the command ends, and only when it did its work: a command that failed says
    its one line and nothing else."""
    failure = sys.exc_info()[1]
    if failure is None or (isinstance(failure, typer.Exit) and failure.exit_code == 0):
        typer.echo(
            f"warning: no worker polls task queue {task_queue!r}: what this command started waits until one does"
            f" (`fleetctl worker` with FLEETCTL_TASK_QUEUE={task_queue})",
            err=True,
        )


_noted: set[tuple[int, str]] = set()


def _note_default(s: Settings, name: str, what: str, how: str) -> None:
    """Say on stderr, once per command, that `what` is the built-in default because nothing
    configured it: an empty table from a database nobody meant to use is not an answer."""
    if s.sources.get(name, "default") != "default" or (id(s), name) in _noted:
        return
    _noted.add((id(s), name))
    typer.echo(
        f"note: using {what}: the default, nothing configured it (set {how}; `fleetctl config` shows all)", err=True
    )


def temporal_read(
    ctx: typer.Context, ask: Callable[[Client], Awaitable[T]], what: str, timeout_s: float = 3.0
) -> tuple[T | None, str | None]:
    """(answer, None) from `ask(client)`, a read a view adds to what the database says; or
    (None, why) when Temporal is unreachable or `what` did not answer within `timeout_s` (a
    busy worker at 1,000 nodes, bench/scale.py; a workflow whose worker is down, where a query
    waits for the server's own limit), so that the rest of the view still stands."""
    from temporalio.service import RPCError

    from fleetctl.workflows.client import TemporalUnavailable

    async def run() -> T:
        client = await temporal_client(ctx, timeout_s, acting=False)
        return await asyncio.wait_for(ask(client), timeout_s)

    try:
        return run_async(run()), None
    except TemporalUnavailable as exc:
        return None, str(exc)
    except RPCError as exc:
        return None, f"{what} did not answer: {exc}"
    except TimeoutError:
        return None, f"{what} did not answer within {timeout_s:g} s"


def intake_token(path: Path | None, flag: str) -> str:
    """The intake's bearer token: the file's contents, else FLEETCTL_INTAKE_TOKEN (empty when
    neither is given), read strictly (fleetctl.intake.credentials.read_token: one line of
    printable ASCII, bounded). An unreadable file or a token that would not be sent as written
    is one line, exit 2, naming `flag` or the variable. Whether it is strong enough is the caller's."""
    from fleetctl.cli.output import EXIT_USAGE, fail
    from fleetctl.intake.credentials import BadCredentials, read_token

    try:
        if path is None:
            raw = os.environ.get("FLEETCTL_INTAKE_TOKEN", "").encode("utf-8", "surrogateescape")
            return read_token(raw, "FLEETCTL_INTAKE_TOKEN") if raw else ""
        return read_token(path.read_bytes(), f"{flag} {path}")
    except OSError as exc:
        fail(f"{flag} {path}: {exc.strerror}", EXIT_USAGE)
    except BadCredentials as exc:
        fail(str(exc), EXIT_USAGE)
