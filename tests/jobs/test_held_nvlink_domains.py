"""The NVLink domains a restart takes no node of, read from the database: a domain is held while
the latest imex check of one of its nodes is not a pass (fleetctl.db.jobs.held_nvlink_domains)."""

from __future__ import annotations

import uuid

from fleetctl.db import jobs, queries
from fleetctl.db.engine import get_engine
from fleetctl.db.models import CheckRun
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
