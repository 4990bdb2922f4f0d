"""Record a check's judged result for a simulated node without a workflow, as a sweep would."""

from __future__ import annotations

import uuid

from fleetctl.checks import judge
from fleetctl.checks.catalog import CHECKS
from fleetctl.config import Settings
from fleetctl.db import queries
from fleetctl.db.engine import get_engine
from fleetctl.db.models import CheckRun
from fleetctl.workflows.activities.executors import ExecutorRegistry, target_for


def record_check(settings: Settings, node: str, check: str) -> CheckRun:
    engine = get_engine(settings.db_url)
    row = queries.get_node(engine, node)
    out = ExecutorRegistry(settings).for_target(target_for(row)).run(target_for(row), CHECKS[check].argv, 60)
    result = judge(CHECKS[check].kind, out.stdout, row.profile).to_dict()
    key = f"test/{node}/{check}/{uuid.uuid4().hex[:6]}"
    return queries.insert_once(
        engine,
        CheckRun(
            node_name=node,
            check_name=check,
            kind=CHECKS[check].kind,
            status=result["status"],
            metrics=result["metrics"],
            findings=result["findings"],
            reason=result["reason"],
            raw_output=out.stdout,
            idempotency_key=key,
        ),
        CheckRun.idempotency_key,
        key,
    )


def recorded_checks(suite: str, profile: str) -> list[str]:
    """The suite's checks, in order, that a node of `profile` runs and records: one that does
    not apply to the profile (imex on an HGX node) is neither."""
    from fleetctl.checks import load_profile
    from fleetctl.checks.suites import load_suite

    gpu_profile = load_profile(profile)
    return [check for check in load_suite(suite).checks if CHECKS[check].applies_to(gpu_profile)]
