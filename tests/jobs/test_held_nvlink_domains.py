"""The NVLink domains a restart takes no node of, read from the database: a domain is held while
the latest imex check of one of its trays still in the domain is not a pass
(fleetctl.db.jobs.held_nvlink_domains); and what else says a domain's fabric failed
(nvlink_domain_witnesses)."""

from __future__ import annotations

import uuid
from datetime import timedelta

import pytest

from fleetctl.db import jobs, queries
from fleetctl.db.engine import get_engine
from fleetctl.db.models import CheckRun, HealthEvent, utcnow
from fleetctl.inventory.parse import NodeSpec


def _check(engine, node: str, kind: str, status: str) -> None:
    key = f"test/{node}/{kind}/{uuid.uuid4().hex[:8]}"
    queries.insert_once(
        engine,
        CheckRun(node_name=node, check_name=kind, kind=kind, status=status, reason=status, idempotency_key=key),
        CheckRun.idempotency_key,
        key,
    )


def test_a_domain_is_held_while_its_latest_imex_check_fails(db_url: str) -> None:
    engine = get_engine(db_url)
    tag = uuid.uuid4().hex[:6]
    d1, d2 = f"nvl-{tag}-1", f"nvl-{tag}-2"
    queries.upsert_nodes(
        engine,
        [
            *(NodeSpec(f"a{i}-{tag}", f"sim://a{i}-{tag}", "gb200", nvlink_domain=d1) for i in range(2)),
            *(NodeSpec(f"b{i}-{tag}", f"sim://b{i}-{tag}", "gb200", nvlink_domain=d2) for i in range(2)),
            NodeSpec(f"h-{tag}", f"sim://h-{tag}", "h100-sxm"),
        ],
    )
    _check(engine, f"a0-{tag}", "imex", "pass")
    _check(engine, f"b0-{tag}", "nvidia-smi-query", "fail")  # a GPU's own fault: the domain is not held
    _check(engine, f"h-{tag}", "imex", "fail")  # a node in no domain holds none
    assert not jobs.held_nvlink_domains(engine) & {d1, d2}

    _check(engine, f"a1-{tag}", "imex", "fail")  # one tray of d1 finds IMEX down
    assert jobs.held_nvlink_domains(engine) & {d1, d2} == {d1}

    _check(engine, f"a1-{tag}", "imex", "pass")  # its latest run passes again: released
    assert not jobs.held_nvlink_domains(engine) & {d1, d2}


def _set_state(engine, node: str, state: str) -> None:
    from sqlalchemy import update
    from sqlmodel import Session

    from fleetctl.db.models import Node

    with Session(engine) as session:
        session.exec(update(Node).where(Node.name == node).values(state=state))
        session.commit()


@pytest.mark.parametrize("gone", ["rma", "retired"])
def test_a_tray_that_left_its_domain_holds_it_no_more(db_url: str, gone: str) -> None:
    """A tray sent to its vendor or retired with a failed last imex check is no part of the
    domain's fabric now: the domain serves restarts again; a tray in maintenance still holds it."""
    engine = get_engine(db_url)
    tag = uuid.uuid4().hex[:6]
    domain = f"nvl-{tag}"
    trays = [f"t{i}-{tag}" for i in range(3)]
    queries.upsert_nodes(engine, [NodeSpec(n, f"sim://{n}", "gb200", nvlink_domain=domain) for n in trays])
    _check(engine, trays[0], "imex", "fail")
    _set_state(engine, trays[0], "maintenance")
    assert domain in jobs.held_nvlink_domains(engine)
    _set_state(engine, trays[0], gone)
    assert domain not in jobs.held_nvlink_domains(engine)


def test_what_else_says_a_domains_fabric_failed(db_url: str) -> None:
    """nvlink_domain_witnesses: the domain's trays (still in it) with a critical event without an
    Xid since the moment, and whether an imex check of one failed since then."""
    engine = get_engine(db_url)
    tag = uuid.uuid4().hex[:6]
    domain = f"nvl-{tag}"
    trays = [f"w{i}-{tag}" for i in range(4)]
    queries.upsert_nodes(engine, [NodeSpec(n, f"sim://{n}", "gb200", nvlink_domain=domain) for n in trays])
    since = utcnow() - timedelta(minutes=10)
    _event(engine, trays[0], None, "critical", utcnow())  # a fatal SXid's kind of event
    _event(engine, trays[1], 79, "critical", utcnow())  # a GPU's own Xid: no witness of the fabric
    _event(engine, trays[2], None, "critical", since - timedelta(minutes=1))  # before the window
    _event(engine, trays[3], None, "critical", utcnow())
    _set_state(engine, trays[3], "retired")  # gone from the domain
    _check(engine, trays[1], "imex", "pass")
    assert jobs.nvlink_domain_witnesses(engine, domain, since) == jobs.DomainWitnesses([trays[0]], False)
    _check(engine, trays[1], "imex", "fail")
    assert jobs.nvlink_domain_witnesses(engine, domain, since).check_failed


def _event(engine, node: str, code: int | None, severity: str, at) -> None:
    key = f"test/{node}/{uuid.uuid4().hex[:8]}"
    queries.insert_once(
        engine,
        HealthEvent(node_name=node, source="agent", code=code, severity=severity, at=at, idempotency_key=key),
        HealthEvent.idempotency_key,
        key,
    )
