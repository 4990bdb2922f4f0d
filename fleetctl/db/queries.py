"""Reads and writes over the tables. Each function opens its own short session."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, TypeVar

from sqlalchemy import func, or_
from sqlalchemy.engine import Engine
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import aliased
from sqlmodel import Session, SQLModel, col, select
from sqlmodel.sql.expression import Select

from fleetctl.db.models import AutomationEvent, CheckRun, HealthEvent, Node, NodeEvent, table_of, utcnow
from fleetctl.inventory.machines import MachineIds, machine_conflict
from fleetctl.inventory.parse import NodeSpec, machines
from fleetctl.nodes.health import occurrences
from fleetctl.nodes.lifecycle import NodeState

if TYPE_CHECKING:  # the stall watch's type only: its module brings in temporalio, ~0.13 s of every CLI start
    from fleetctl.nodes.stalls import Stall

T = TypeVar("T")
RowT = TypeVar("RowT", bound=SQLModel)

_INVENTORY_FIELDS = {
    "address": "address",
    "bmc_address": "bmc",
    "ssh_user": "user",
    "jump_host": "jump",
    "rack": "rack",
    "switch": "switch",
    "island": "island",
    "position": "position",
    "nvlink_domain": "nvlink_domain",
    "profile": "profile",
    "scheduler": "scheduler",
    "labels": "labels",
}


class StaleStateVersion(RuntimeError):
    """The node's state moved on since the writer last saw it."""


class NameClash(ValueError):
    """A new node's name differs only in case from a known node's: one machine to DNS, to
    Slurm's hostlists and to Kubernetes, so two rows would be two owners of one node."""


def case_clashes(engine: Engine, names: Iterable[str]) -> dict[str, str]:
    """{name: the known node's name} for each name a known node spells with other cases."""
    wanted = {n.lower(): n for n in names}
    if not wanted:
        return {}
    with Session(engine) as session:
        known = session.exec(select(Node.name).where(func.lower(Node.name).in_(list(wanted))))
        return {wanted[k.lower()]: k for k in known if wanted[k.lower()] != k}


def upsert_nodes(engine: Engine, specs: Sequence[NodeSpec]) -> tuple[list[str], list[str], list[str]]:
    """Insert new nodes, update changed inventory fields; never touches state. Idempotent."""
    created, updated, unchanged = [], [], []
    names = [s.name for s in specs]
    if clashes := case_clashes(engine, names):
        raise NameClash(clash_message(clashes))
    if clash := machine_clash(engine, specs):
        raise NameClash(clash)
    with Session(engine) as session:
        existing = {n.name: n for n in session.exec(select(Node).where(col(Node.name).in_(names)))} if names else {}
        for spec in specs:
            node = existing.get(spec.name)
            values = {column: getattr(spec, attr) for column, attr in _INVENTORY_FIELDS.items()}
            if node is None:
                session.add(Node(name=spec.name, **values))
                created.append(spec.name)
                continue
            changed = {k: v for k, v in values.items() if getattr(node, k) != v}
            if changed:
                for k, v in changed.items():
                    setattr(node, k, v)
                node.updated_at = utcnow()
                session.add(node)
                updated.append(spec.name)
            else:
                unchanged.append(spec.name)
        session.commit()
    return created, updated, unchanged


def machine_clash(engine: Engine, specs: Sequence[NodeSpec]) -> str | None:
    """An address or BMC a new spec shares with another node of the fleet, as one line (None: none)."""
    with Session(engine) as session:
        known = session.exec(select(Node.name, Node.address, Node.bmc_address))
        return machine_conflict(machines(specs), (MachineIds(*row) for row in known))


def clash_message(clashes: dict[str, str]) -> str:
    shown = ", ".join(f"{new} (known as {old})" for new, old in sorted(clashes.items())[:5])
    more = f" and {len(clashes) - 5} more" if len(clashes) > 5 else ""
    return f"node names ignore case: {shown}{more} already in the fleet; use the known spelling"


def list_nodes(
    engine: Engine, labels: dict[str, str] | None = None, state: str | Sequence[str] | None = None
) -> list[Node]:
    """Nodes by name; `state` one state or several (any of them)."""
    with Session(engine) as session:
        query = select(Node).order_by(Node.name)
        if state:
            query = query.where(col(Node.state).in_([state] if isinstance(state, str) else list(state)))
        nodes = list(session.exec(query))
    if labels:
        nodes = [n for n in nodes if all(str(n.labels.get(k)) == v for k, v in labels.items())]
    return nodes


def get_node(engine: Engine, name: str) -> Node | None:
    with Session(engine) as session:
        return session.exec(select(Node).where(Node.name == name)).first()


def nodes_named(engine: Engine, names: Iterable[str]) -> list[Node]:
    names = list(names)
    with Session(engine) as session:
        return list(session.exec(select(Node).where(col(Node.name).in_(names)))) if names else []


def nodes_in_nvlink_domain(engine: Engine, domain: str) -> list[Node]:
    """The nodes of one NVLink domain (the inventory's `nvlink_domain`); none for ""."""
    if not domain:
        return []
    with Session(engine) as session:
        return list(session.exec(select(Node).where(Node.nvlink_domain == domain).order_by(Node.name)))


def existing_names(engine: Engine, names: Iterable[str]) -> set[str]:
    names = list(names)
    with Session(engine) as session:
        return set(session.exec(select(Node.name).where(col(Node.name).in_(names)))) if names else set()


def record_transition(
    engine: Engine,
    *,
    node_name: str,
    from_state: str,
    to_state: str,
    trigger: str,
    cause: str,
    actor: str,
    actor_kind: str,
    workflow_id: str,
    run_id: str,
    expected_version: int,
    idempotency_key: str,
    failure: str = "",
    at: datetime | None = None,
) -> int:
    """Append the event and move the node, atomically. Returns the node's new version.

    Idempotent on `idempotency_key`: a retried activity whose first attempt committed finds
    its event and returns the same version without writing again.
    """
    with Session(engine) as session:
        done = session.exec(select(NodeEvent).where(NodeEvent.idempotency_key == idempotency_key)).first()
        if done is not None:
            return done.state_version
        node = session.exec(select(Node).where(Node.name == node_name).with_for_update()).first()
        if node is None:
            raise LookupError(f"unknown node {node_name}")
        if node.state_version != expected_version or node.state != from_state:
            raise StaleStateVersion(
                f"{node_name}: database has {node.state}@{node.state_version}, writer expected {from_state}@{expected_version}"
            )
        now = at or utcnow()
        node.state = to_state
        node.state_version = expected_version + 1
        node.state_since = now
        node.updated_at = now
        session.add(node)
        session.add(
            NodeEvent(
                node_name=node_name,
                from_state=from_state,
                to_state=to_state,
                trigger=trigger,
                cause=cause,
                actor=actor,
                actor_kind=actor_kind,
                at=now,
                workflow_id=workflow_id,
                run_id=run_id,
                state_version=node.state_version,
                idempotency_key=idempotency_key,
                failure=failure,
            )
        )
        try:
            session.commit()
        except IntegrityError:
            # A concurrent retry of the same activity won the race: same outcome.
            session.rollback()
            done = session.exec(select(NodeEvent).where(NodeEvent.idempotency_key == idempotency_key)).one()
            return done.state_version
        return expected_version + 1


ADOPTED_CAUSE = "adopted: in production when imported; unchecked until a sweep checks it idle"


def record_adoption(engine: Engine, name: str, actor: str, workflow_id: str, idempotency_key: str) -> int | None:
    """`node import --adopt`: the node, new and never moved (version 0), is recorded as
    adopted into production (one node_events row, trigger `adopt`), before its workflow starts
    there. Its new version; None when the node has moved already (not adopted: it has a
    life of its own). Again after it was adopted: the same version, nothing written."""
    from fleetctl.nodes.lifecycle import Trigger, next_state

    node = get_node(engine, name)
    if node is None:
        raise LookupError(f"unknown node {name}")
    with Session(engine) as session:
        done = session.exec(select(NodeEvent).where(NodeEvent.idempotency_key == idempotency_key)).first()
    if done is not None:
        return done.state_version if done.trigger == Trigger.ADOPT.value else None
    if node.state != NodeState.NEW.value or node.state_version != 0:
        return None
    target = next_state(node.state, Trigger.ADOPT, "operator").value
    return record_transition(
        engine,
        node_name=name,
        from_state=node.state,
        to_state=target,
        trigger=Trigger.ADOPT.value,
        cause=ADOPTED_CAUSE,
        actor=actor,
        actor_kind="operator",
        workflow_id=workflow_id,
        run_id="",
        expected_version=0,
        idempotency_key=idempotency_key,
    )


def node_events(engine: Engine, name: str, limit: int | None = None) -> list[NodeEvent]:
    with Session(engine) as session:
        query = select(NodeEvent).where(NodeEvent.node_name == name).order_by(col(NodeEvent.id).desc())
        if limit:
            query = query.limit(limit)
        return list(reversed(list(session.exec(query))))


def latest_checks(engine: Engine, name: str, limit: int = 20) -> list[CheckRun]:
    with Session(engine) as session:
        query = select(CheckRun).where(CheckRun.node_name == name).order_by(col(CheckRun.id).desc()).limit(limit)
        return list(session.exec(query))


def health_events(engine: Engine, name: str, limit: int = 20) -> list[HealthEvent]:
    with Session(engine) as session:
        query = (
            select(HealthEvent).where(HealthEvent.node_name == name).order_by(col(HealthEvent.id).desc()).limit(limit)
        )
        return list(session.exec(query))


def state_counts(engine: Engine) -> dict[str, int]:
    with Session(engine) as session:
        rows = session.exec(select(Node.state, func.count()).group_by(Node.state))
        return dict(rows.all())


def insert_once(engine: Engine, row: RowT, key_column: str, key: str) -> RowT:
    """Insert `row` unless a row with this idempotency key exists; return the stored row.
    `key_column` is the model's key attribute (Model.idempotency_key: sqlmodel types it as its
    value, a str; col() checks it is a column)."""
    model = type(row)
    # The row as written is the row stored (no server-side defaults), so it is not read back
    # after the commit: that re-read was ~5 % of the worker's CPU in the throughput profile.
    with Session(engine, expire_on_commit=False) as session:
        existing = session.exec(select(model).where(col(key_column) == key)).first()
        if existing is not None:
            return existing
        session.add(row)
        try:
            session.commit()
        except IntegrityError:  # a concurrent retry stored it first
            session.rollback()
            return session.exec(select(model).where(col(key_column) == key)).one()
        return row


def check_run_by_key(engine: Engine, key: str) -> CheckRun | None:
    with Session(engine) as session:
        return session.exec(select(CheckRun).where(CheckRun.idempotency_key == key)).first()


def check_runs(engine: Engine, ids: Sequence[int]) -> list[CheckRun]:
    with Session(engine) as session:
        return list(session.exec(select(CheckRun).where(col(CheckRun.id).in_(list(ids))).order_by(col(CheckRun.id))))


# Enough peers for a stable median and MAD; more only costs time (admitting N nodes would
# otherwise read O(N^2) check rows).
PEER_SAMPLE = 200


def peer_metrics(
    engine: Engine, profile: str, check: str, metric: str, exclude: str, sample: int = PEER_SAMPLE
) -> dict[str, float]:
    """The latest judged value of `metric` from `check` on up to `sample` other nodes of the
    profile that are admitted or being admitted (the peers a new node is compared with): the
    most recently judged ones, one run per node."""
    with Session(engine) as session:
        latest_run = (
            select(CheckRun.node_name, func.max(CheckRun.id).label("run_id"))
            .join(Node, col(Node.name) == CheckRun.node_name)
            .where(
                CheckRun.check_name == check,
                col(CheckRun.status).in_(["pass", "warn"]),
                Node.profile == profile,
                col(Node.state).in_(["production", "admission", "draining"]),
                Node.name != exclude,
            )
            .group_by(CheckRun.node_name)
            .order_by(func.max(CheckRun.id).desc())
            .limit(sample)
            .subquery()
        )
        rows = session.exec(
            select(CheckRun.node_name, CheckRun.metrics).join(latest_run, col(CheckRun.id) == latest_run.c.run_id)
        )
        peers: dict[str, float] = {}
        for name, metrics in rows:
            value = (metrics or {}).get(metric)
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                peers[name] = float(value)
        return peers


def _epoch(at: datetime) -> float:
    """SQLite gives back naive datetimes (stored as UTC)."""
    return (at if at.tzinfo else at.replace(tzinfo=UTC)).timestamp()


def health_events_in_service(engine: Engine, name: str, coded_only: bool = True) -> list[HealthEvent]:
    """The node's health events with a code (every one, `coded_only` False), recorded since it
    last entered production (all of them if it never did), newest first."""
    with Session(engine) as session:
        entered = session.exec(
            select(NodeEvent.at)
            .where(NodeEvent.node_name == name, NodeEvent.to_state == NodeState.PRODUCTION.value)
            .order_by(col(NodeEvent.at).desc())
        ).first()
        query = select(HealthEvent).where(HealthEvent.node_name == name)
        if coded_only:
            query = query.where(col(HealthEvent.code).is_not(None))
        if entered is not None:
            query = query.where(HealthEvent.at >= entered)
        return list(session.exec(query.order_by(col(HealthEvent.at).desc())))


def record_health_events(
    engine: Engine,
    node: str,
    items: Sequence[tuple[str, int | None, float, int]],
    judge: Callable[[int, float, list[float]], tuple[HealthEvent, T]],
) -> list[T]:
    """The node's health events, each recorded once, in order, in one transaction: a burst
    costs one commit, not one per event. `items` are (idempotency key, code, time, repeat
    count); `judge(index, time, earlier)` builds the row and the verdict of items[index], where
    `earlier` are the times of the node's other occurrences of this code (those before it in
    `items` included), a row that stands for N folded repeats counted N times at its time. An
    event already stored keeps the time it was first recorded with, and is not written again."""
    keys = [key for key, _, _, _ in items]
    codes = {code for _, code, _, _ in items if code is not None}
    results: list[T] = []
    with Session(engine, expire_on_commit=False) as session:
        stored = dict(
            session.exec(
                select(HealthEvent.idempotency_key, HealthEvent.at).where(col(HealthEvent.idempotency_key).in_(keys))
            ).all()
        )
        # {code: {key: (time, repeats)}}: one query per code, then kept up to date as the batch
        # is recorded, so a burst of one code is not one query per event over a growing table.
        # Keyed as the column is typed (int | None); the query reads only the codes in `codes`.
        times: dict[int | None, dict[str, tuple[float, int]]] = {code: {} for code in codes}
        for event_key, event_code, event_at, event_repeats in (
            session.exec(
                select(HealthEvent.idempotency_key, HealthEvent.code, HealthEvent.at, HealthEvent.repeat_count).where(
                    HealthEvent.node_name == node, col(HealthEvent.code).in_(codes)
                )
            )
            if codes
            else ()
        ):
            times[event_code][event_key] = (_epoch(event_at), event_repeats)
        for index, (key, code, at, repeats) in enumerate(items):
            at = _epoch(stored[key]) if key in stored else at
            earlier = (
                []
                if code is None
                else [t for k, (seen, n) in times[code].items() if k != key for t in occurrences(seen, n)]
            )
            row, verdict = judge(index, at, earlier)
            if key not in stored:
                session.add(row)
                stored[key] = row.at
                if code is not None:
                    times[code][key] = (at, repeats)
            results.append(verdict)
        session.commit()  # a concurrent writer of the same key: IntegrityError, and the retry reads it
    return results


def health_event_ids_starting(engine: Engine, prefixes: Sequence[str]) -> set[str]:
    """The ids (idempotency keys) of the health events recorded under any of `prefixes`."""
    if not prefixes:
        return set()
    with Session(engine) as session:
        return set(
            session.exec(
                select(HealthEvent.idempotency_key).where(
                    or_(*(col(HealthEvent.idempotency_key).startswith(p, autoescape=True) for p in prefixes))
                )
            )
        )


def open_external_drains(engine: Engine, source: str = "external-drain") -> dict[str, HealthEvent]:
    """Per production node, the latest health event of another tool's drain (`source`) since
    it last changed state, while that drain stands: the watcher records its lifting as an
    `info` event of the same source."""
    with Session(engine) as session:
        latest = (
            select(func.max(HealthEvent.id))
            .join(Node, col(Node.name) == HealthEvent.node_name)
            .where(
                HealthEvent.source == source,
                Node.state == NodeState.PRODUCTION.value,
                HealthEvent.at >= Node.state_since,
            )
            .group_by(HealthEvent.node_name)
        )
        rows = session.exec(select(HealthEvent).where(col(HealthEvent.id).in_(latest), HealthEvent.severity != "info"))
        return {e.node_name: e for e in rows}


AGENT_SILENCE_ACTOR = "agent-silence"  # the actor of a suspect judgement that an agent fell silent


@dataclass(frozen=True)
class Suspicion:
    """A node judged suspect: the latest judgement's reason and actor, when it was made
    (`at`), and `since`: the first judgement of this spell (each sweep judges again; the
    node has been suspect since the first)."""

    node_name: str
    reason: str
    actor: str
    at: datetime
    since: datetime


def suspect_nodes(engine: Engine) -> dict[str, Suspicion]:
    """Nodes judged suspect (fleetctl.nodes.reachability) since they entered their current state,
    with the latest judgement and the first: a node drained, repaired and back is no longer
    suspect, nor is one whose silent agent has been heard again since it was judged."""
    with Session(engine) as session:
        not_heard_again = or_(
            col(AutomationEvent.actor) != AGENT_SILENCE_ACTOR,
            col(Node.agent_seen_at).is_(None),
            col(Node.agent_seen_at) <= AutomationEvent.at,
        )
        # The node's name from the join, typed str: the event's node_name column is optional.
        rows = session.exec(
            select(AutomationEvent, Node.name)
            .join(Node, col(Node.name) == AutomationEvent.node_name)
            .where(AutomationEvent.kind == "suspect", AutomationEvent.at >= Node.state_since, not_heard_again)
            .order_by(col(AutomationEvent.id))
        )
        found: dict[str, Suspicion] = {}
        for e, name in rows:
            first = found.get(name)
            since = e.at if first is None else min(first.since, e.at)
            found[name] = Suspicion(name, e.reason, e.actor, e.at, since)
        return found


STALLED, UNSTALLED = "stalled", "unstalled"
STALL_WATCHER = "stall-watch"


def stalled_nodes(engine: Engine) -> dict[str, AutomationEvent]:
    """Nodes whose workflow the stall watcher (workflows.worker) last found stalled, with that
    finding: the latest of their `stalled` / `unstalled` events is `stalled`."""
    with Session(engine) as session:
        latest = (
            select(func.max(AutomationEvent.id))
            .where(col(AutomationEvent.kind).in_((STALLED, UNSTALLED)))
            .group_by(AutomationEvent.node_name)
        )
        rows = session.exec(
            select(AutomationEvent).where(col(AutomationEvent.id).in_(latest), AutomationEvent.kind == STALLED)
        )
        # Every stall event names its node (record_stalls writes them); the check narrows the column's type.
        return {e.node_name: e for e in rows if e.node_name is not None}


def record_stalls(engine: Engine, stalls: Sequence[Stall], now: datetime, fleet: str) -> tuple[list[str], list[str]]:
    """Record one watch's findings (fleetctl.nodes.stalls.Stall) for the nodes of `fleet`'s
    task queue: a node newly stalled gets a `stalled` event with the reason, one no longer
    found gets `unstalled`. (newly, cleared)."""
    before = {n: e for n, e in stalled_nodes(engine).items() if e.fleet == fleet}
    found = {s.node: s for s in stalls}
    newly = sorted(set(found) - set(before))
    cleared = sorted(set(before) - set(found))
    for node in newly:
        key = f"{STALLED}/{node}/{found[node].since.isoformat()}"
        insert_once(
            engine,
            AutomationEvent(
                fleet=fleet,
                kind=STALLED,
                node_name=node,
                reason=found[node].reason,
                actor=STALL_WATCHER,
                at=now,
                idempotency_key=key,
            ),
            AutomationEvent.idempotency_key,
            key,
        )
    for node in cleared:
        key = f"{UNSTALLED}/{node}/{now.isoformat()}"
        insert_once(
            engine,
            AutomationEvent(
                fleet=fleet,
                kind=UNSTALLED,
                node_name=node,
                reason="working its queue again",
                actor=STALL_WATCHER,
                at=now,
                idempotency_key=key,
            ),
            AutomationEvent.idempotency_key,
            key,
        )
    return newly, cleared


def record_agent_heartbeats(engine: Engine, heard: dict[str, datetime]) -> int:
    """Each node's agent heard at its time (the intake's clock), in one statement for them
    all; a time older than the one stored (another intake wrote a later one) is ignored.
    Names the inventory does not hold change nothing. Returns the rows updated."""
    if not heard:
        return 0
    from sqlalchemy import bindparam, update

    table = table_of(Node)  # a Core statement: one executemany, no ORM bulk-by-primary-key
    nodes = table.c
    stmt = (
        update(table)
        .where(nodes.name == bindparam("n"), or_(nodes.agent_seen_at.is_(None), nodes.agent_seen_at < bindparam("t")))
        .values(agent_seen_at=bindparam("t"))
    )
    with engine.begin() as conn:
        result = conn.execute(stmt, [{"n": name, "t": at} for name, at in heard.items()])
        return result.rowcount


def automation_events(engine: Engine, limit: int = 20, node: str | None = None) -> list[AutomationEvent]:
    """The latest `limit` automation events (of `node`, when given), newest first."""
    with Session(engine) as session:
        query = select(AutomationEvent).order_by(col(AutomationEvent.id).desc()).limit(limit)
        if node is not None:
            query = query.where(AutomationEvent.node_name == node)
        return list(session.exec(query))


def breaker_events(engine: Engine, fleet: str) -> list[AutomationEvent]:
    """The fleet's breaker openings and closings, oldest first (rare: a few a month)."""
    with Session(engine) as session:
        return list(
            session.exec(
                select(AutomationEvent)
                .where(
                    AutomationEvent.fleet == fleet, col(AutomationEvent.kind).in_(["breaker_open", "breaker_closed"])
                )
                .order_by(col(AutomationEvent.at), col(AutomationEvent.id))
            )
        )


def recent_events(engine: Engine, limit: int = 10, actor_kind: str | None = None) -> list[NodeEvent]:
    with Session(engine) as session:
        query = select(NodeEvent).order_by(col(NodeEvent.id).desc()).limit(limit)
        if actor_kind is not None:
            query = query.where(NodeEvent.actor_kind == actor_kind)
        return list(session.exec(query))


def latest_check_per_kind(engine: Engine, names: Sequence[str] | None = None) -> dict[str, list[CheckRun]]:
    """Per node, the latest run of each check it has run: what `node list`'s HEALTH column
    reads, in one query for the whole fleet."""
    with Session(engine) as session:
        latest = select(func.max(CheckRun.id).label("run_id")).group_by(CheckRun.node_name, CheckRun.check_name)
        if names is not None:
            latest = latest.where(col(CheckRun.node_name).in_(list(names)))
        rows = session.exec(
            select(CheckRun).where(col(CheckRun.id).in_(latest.scalar_subquery())).order_by(col(CheckRun.id).desc())
        )
        found: dict[str, list[CheckRun]] = {}
        for run in rows:
            found.setdefault(run.node_name, []).append(run)
        return found


def held_drains(engine: Engine, names: Sequence[str] | None = None) -> dict[str, tuple[int, datetime, datetime, str]]:
    """Per production node whose drain the capacity guard holds: (refusals, first, last, the
    latest refusal's reason). Held means the guard's latest decision about the node since it
    last changed state is a refusal; the refusals counted are those since its last grant."""
    from fleetctl.nodes.conditions import GUARD_DECISIONS, GUARD_DENIALS

    granted = sorted(GUARD_DECISIONS - GUARD_DENIALS)
    with Session(engine) as session:
        grant = aliased(AutomationEvent)
        last_grant = (
            select(func.coalesce(func.max(grant.id), 0))
            .where(grant.node_name == AutomationEvent.node_name, col(grant.kind).in_(granted))
            .scalar_subquery()
        )
        # Select() itself, as sqlmodel's select() builds one: select() is typed for up to 4 columns,
        # and the class cannot infer its column types, so the rows are Any.
        query: Select[*tuple[Any, ...]] = (
            Select(
                col(AutomationEvent.node_name),
                func.count(),
                func.min(AutomationEvent.at),
                func.max(AutomationEvent.at),
                func.max(AutomationEvent.id),
            )
            .join(Node, col(Node.name) == AutomationEvent.node_name)
            .where(
                Node.state == "production",
                col(AutomationEvent.kind).in_(sorted(GUARD_DENIALS)),
                AutomationEvent.at >= Node.state_since,
                AutomationEvent.id > last_grant,
            )
            .group_by(AutomationEvent.node_name)
        )
        if names is not None:
            query = query.where(col(AutomationEvent.node_name).in_(list(names)))
        rows = list(session.exec(query))
        # a result has keys(), so dict() would read it as a mapping: take its rows
        reasons = (
            dict(
                session.exec(
                    select(AutomationEvent.id, AutomationEvent.reason).where(
                        col(AutomationEvent.id).in_([r[4] for r in rows])
                    )
                ).all()
            )
            if rows
            else {}
        )
        return {node: (count, first, last, reasons[last_id]) for node, count, first, last, last_id in rows}


def latest_transitions(engine: Engine, names: Sequence[str] | None = None) -> dict[str, NodeEvent]:
    """Per node, its latest transition: the cause and actor the REASON column shows."""
    with Session(engine) as session:
        latest = select(func.max(NodeEvent.id)).group_by(NodeEvent.node_name)
        if names is not None:
            latest = latest.where(col(NodeEvent.node_name).in_(list(names)))
        return {
            e.node_name: e
            for e in session.exec(select(NodeEvent).where(col(NodeEvent.id).in_(latest.scalar_subquery())))
        }


def health_events_since(engine: Engine, names: Sequence[str], since: datetime) -> list[HealthEvent]:
    """The health events of the nodes `names` recorded at or after `since`, oldest first."""
    with Session(engine) as session:
        query = select(HealthEvent).where(col(HealthEvent.node_name).in_(sorted(set(names))), HealthEvent.at >= since)
        return list(session.exec(query.order_by(col(HealthEvent.at))))
