"""The light client side: workflows.api names what the workflow definitions define, the
moved dataclasses give the same payloads as before the move, and `fleetctl node event`
starts without importing the workflows, the activity stack or the database."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import temporalio.workflow
from temporalio.converter import DataConverter

from fleetctl.workflows import api
from fleetctl.workflows.definitions.capacity_guard import CapacityGuard
from fleetctl.workflows.definitions.firmware_rollout import FirmwareRollout
from fleetctl.workflows.definitions.node_lifecycle import NodeLifecycle
from fleetctl.workflows.worker import WORKFLOWS

REPO = Path(__file__).resolve().parents[2]


def _definition(cls: type):
    return temporalio.workflow._Definition.must_from_class(cls)


def test_names_match_the_workflow_definitions() -> None:
    assert {
        api.NODE_LIFECYCLE,
        api.CAPACITY_GUARD,
        api.ACTIVE_CHECK_SWEEP,
        api.REMEDIATION,
        api.JOB_RESTART,
        api.FIRMWARE_ROLLOUT,
    } <= {_definition(w).name for w in WORKFLOWS}
    node, guard, rollout = _definition(NodeLifecycle), _definition(CapacityGuard), _definition(FirmwareRollout)
    assert (node.name, guard.name, rollout.name) == (api.NODE_LIFECYCLE, api.CAPACITY_GUARD, api.FIRMWARE_ROLLOUT)
    signal = node.signals[api.HEALTH_EVENT_SIGNAL]
    assert signal.fn.__name__ == "health_event" and signal.arg_types == [api.HealthEventInput]
    assert node.updates[api.TRANSITION_UPDATE].arg_types == [api.TransitionRequest]
    assert node.updates[api.ADMIT_UPDATE].arg_types == node.updates[api.RECHECK_UPDATE].arg_types == [api.PhaseRequest]
    assert node.queries[api.NODE_STATE_QUERY].ret_type is api.NodeLifecycleState
    assert {api.REQUEST_REMOVAL_UPDATE, api.RESUME_AUTOMATION_UPDATE, api.REPORT_CHECK_ERRORS_UPDATE} <= set(
        guard.updates
    )
    assert guard.queries[api.GUARD_STATUS_QUERY].ret_type is api.CapacityGuardState
    assert {api.ROLLOUT_RESUME_UPDATE, api.ROLLOUT_ABORT_UPDATE} <= set(rollout.updates)
    assert rollout.queries[api.ROLLOUT_PROGRESS_QUERY].ret_type is api.RolloutStatus


def _payload(value) -> dict:
    (payload,) = DataConverter.default.payload_converter.to_payloads([value])
    assert payload.metadata["encoding"] == b"json/plain"
    return json.loads(payload.data)


def test_a_moved_class_gives_the_payload_the_histories_hold() -> None:
    ev = api.HealthEventInput("gpu-7", "xid", 79, "fallen off the bus", "alice", "e1", 1.5)
    # Field by field, as the histories in tests/histories hold it: the class's module is not in it.
    recorded = {
        "node": "gpu-7",
        "source": "xid",
        "code": 79,
        "message": "fallen off the bus",
        "actor": "alice",
        "event_id": "e1",
        "at": 1.5,
        "received_at": 0.0,
    }
    # Fields added since (with defaults) follow the recorded ones; a recorded payload without
    # them decodes to the same event.
    assert _payload(ev) == {
        **recorded,
        "severity": "",
        "at_from_record": False,
        "signature": "",
        "repeat_count": 1,
        "first_seen": 0.0,
        "last_seen": 0.0,
        "gpu": "",
    }
    decode = DataConverter.default.payload_converter.from_payloads
    assert decode(DataConverter.default.payload_converter.to_payloads([recorded]), [api.HealthEventInput]) == [ev]


def test_one_transition_request_reads_both_payloads_it_replaced() -> None:
    """NodeCommand (the command_node activity's input) and TransitionRequest (the transition
    update's) are one class now; recorded payloads of either still decode into it."""
    decode = DataConverter.default.payload_converter.from_payloads
    to = DataConverter.default.payload_converter.to_payloads
    update = {
        "trigger": "drain",
        "actor": "alice",
        "actor_kind": "operator",
        "cause": "c",
        "request_id": "r",
        "event": None,
    }
    command = {
        "node": "gpu-7",
        "trigger": "drain",
        "actor": "runbook:x",
        "cause": "c",
        "actor_kind": "automation",
        "request_id": "k/drain",
        "event": {"kind": "xid", "code": 79},
    }
    for recorded in (update, command):
        (req,) = decode(to([recorded]), [api.TransitionRequest])
        assert isinstance(req, api.TransitionRequest)
        assert {k: getattr(req, k) for k in recorded} == recorded
    # The one field added since (with its default, so old payloads decode): the guard's grant.
    assert _payload(
        api.TransitionRequest(
            node="gpu-7",
            trigger="drain",
            actor="runbook:x",
            actor_kind="automation",
            cause="c",
            request_id="k/drain",
            event={"kind": "xid", "code": 79},
        )
    ) == {**command, "grant": ""}


HEAVY = (
    "fleetctl.workflows.definitions",
    "fleetctl.workflows.activities",
    "fleetctl.checks",
    "sqlmodel",
    "sqlalchemy",
    "fleetctl.db.queries",
    "paramiko",
)
# Of checks, only what reading a config file needs (the package, its result types, the safe
# YAML loader), the catalog's tables and the site's Xid policy the event's severity comes
# from; never a parser or the profiles.
LIGHT = (
    "fleetctl.checks",
    "fleetctl.checks._text",
    "fleetctl.checks.result",
    "fleetctl.checks.safe_yaml",
    "fleetctl.checks.signatures",
    "fleetctl.checks.xid_catalog",
    "fleetctl.checks.xid_policy",
)


def test_node_event_imports_neither_the_workflows_nor_the_database(tmp_path) -> None:
    """Against a Temporal server that is not there: one error line, exit 1, and none of the
    heavy modules imported (they cost seconds of the reaction to a critical event)."""
    script = textwrap.dedent(f"""
        import json, sys
        from typer.testing import CliRunner
        from fleetctl.cli.main import app
        from fleetctl.connections.temporal_server import free_port
        r = CliRunner().invoke(app, ["--db-url", "sqlite:///{tmp_path}/fleet.db", "--temporal-address",
                                     f"127.0.0.1:{{free_port()}}", "node", "event", "gpu-7", "--xid", "79"])
        heavy = {HEAVY!r}
        print(json.dumps({{"code": r.exit_code, "stderr": r.stderr,
                          "heavy": sorted(m for m in sys.modules if m not in {LIGHT!r}
                                         and any(m == h or m.startswith(h + ".") for h in heavy))}}),
              flush=True)
        # Leave as fleetctl.cli.main.run() does: the Temporal client's native runtime can crash
        # the interpreter's teardown (sdk-python#300; seen here as SIGSEGV in one CI rehearsal).
        import os
        os._exit(0)
    """)
    done = subprocess.run(
        [sys.executable, "-c", script],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
        env={"PATH": "/usr/bin:/bin", "FLEETCTL_CONFIG": "/dev/null", "HOME": str(tmp_path)},
    )
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout.strip().splitlines()[-1])
    assert out["code"] == 1
    lines = out["stderr"].strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: cannot reach Temporal at 127.0.0.1:"), out["stderr"]
    assert out["heavy"] == []
