"""The light client side: workflows.messages names what NodeLifecycle defines, the moved
dataclass is the same class and the same payload, and `fleetctl node event` starts without
importing the workflows, the activity stack or the database."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import temporalio.workflow
from temporalio.converter import DataConverter

from workflows import messages, node_activities, node_lifecycle

REPO = Path(__file__).resolve().parents[2]


def test_names_match_the_workflow_definitions() -> None:
    definition = temporalio.workflow._Definition.must_from_class(node_lifecycle.NodeLifecycle)
    signal = definition.signals[messages.HEALTH_EVENT_SIGNAL]
    assert signal.fn.__name__ == "health_event" and signal.arg_types == [messages.HealthEventInput]
    assert messages.node_workflow_id("gpu-7") == node_lifecycle.workflow_id_for("gpu-7")


def test_the_moved_class_is_re_exported_not_copied_and_its_payload_is_unchanged() -> None:
    assert node_activities.HealthEventInput is messages.HealthEventInput
    ev = messages.HealthEventInput("gpu-7", "xid", 79, "fallen off the bus", "alice", "e1", 1.5)
    (payload,) = DataConverter.default.payload_converter.to_payloads([ev])
    # Field by field, as the histories in tests/histories hold it: the class's module is not in it.
    assert json.loads(payload.data) == {"node": "gpu-7", "source": "xid", "code": 79, "message": "fallen off the bus",
                                        "actor": "alice", "event_id": "e1", "at": 1.5, "received_at": 0.0}
    assert payload.metadata["encoding"] == b"json/plain"


HEAVY = ("workflows.node_activities", "workflows.node_lifecycle", "workflows.activities", "checks", "sqlmodel",
         "sqlalchemy", "fleetctl.db.queries", "paramiko")


def test_node_event_imports_neither_the_workflows_nor_the_database(tmp_path) -> None:
    """Against a Temporal server that is not there: one error line, exit 1, and none of the
    heavy modules imported (they cost seconds of the reaction to a critical event)."""
    script = textwrap.dedent(f"""
        import json, sys
        from typer.testing import CliRunner
        from fleetctl.cli.main import app
        from fleetctl.temporal_server import free_port
        r = CliRunner().invoke(app, ["--db-url", "sqlite:///{tmp_path}/fleet.db", "--temporal-address",
                                     f"127.0.0.1:{{free_port()}}", "node", "event", "gpu-7", "--xid", "79"])
        heavy = {HEAVY!r}
        print(json.dumps({{"code": r.exit_code, "stderr": r.stderr,
                          "heavy": sorted(m for m in sys.modules if any(m == h or m.startswith(h + ".") for h in heavy))}}),
              flush=True)
        # Leave as fleetctl.cli.main.run() does: the Temporal client's native runtime can crash
        # the interpreter's teardown (sdk-python#300; seen here as SIGSEGV in one CI rehearsal).
        import os
        os._exit(0)
    """)
    done = subprocess.run([sys.executable, "-c", script], cwd=REPO, capture_output=True, text=True, timeout=60,
                          env={"PATH": "/usr/bin:/bin", "FLEETCTL_CONFIG": "/dev/null", "HOME": str(tmp_path)})
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout.strip().splitlines()[-1])
    assert out["code"] == 1
    lines = out["stderr"].strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: cannot reach Temporal at 127.0.0.1:"), out["stderr"]
    assert out["heavy"] == []
