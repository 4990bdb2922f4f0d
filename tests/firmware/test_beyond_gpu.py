"""Drift beyond the GPU and the NIC: the BMC's own firmware, read where the drift is computed
(FirmwareActivities.node_drift, so no workflow runs anything new), and a tray's nvfwupd
inventory recorded with `fleetctl firmware report`; both are compared with the baseline like
the checks' VBIOS and ConnectX inventories, in `firmware status` and in the roll-outs."""

from __future__ import annotations

import dataclasses
import json
from datetime import timedelta
from pathlib import Path
from typing import Any

from temporalio.testing import ActivityEnvironment
from typer.testing import CliRunner

from fleetctl.cli.main import app
from fleetctl.db import firmware as fwdb
from fleetctl.db import queries
from fleetctl.db.engine import get_engine
from fleetctl.db.models import CheckRun
from fleetctl.inventory.parse import parse_inventory
from fleetctl.remediation.firmware import parse_baseline
from fleetctl.workflows.activities.firmware import FirmwareActivities
from fleetctl.workflows.api import DriftRequest
from tests.bmc.redfish_stub import Answer, ScriptedRedfish
from tests.bmc.sushy_emulator import run_sushy_emulator

FIXTURES = Path(__file__).parents[1] / "fixtures"
EXPANDED_INVENTORY = "/redfish/v1/UpdateService/FirmwareInventory?$expand=.($levels=1)"
VBIOS_OK = {f"GPU {i} VBIOS": "96.00.99.00.01" for i in range(8)}
H100_BASELINE = """
name: fleet-2026-12
profiles:
  h100-sxm:
    "GPU * VBIOS": "96.00.99.00.01"
    "BMC": "{bmc}"
"""


def _inventory(bmc_version: str) -> dict[str, Any]:
    """The expanded FirmwareInventory fixture with the BMC member at `bmc_version`."""
    text = (FIXTURES / "checks" / "firmware" / "redfish_expanded_ok.txt").read_text()
    doc = json.loads("".join(line for line in text.splitlines(True) if not line.startswith("#")))
    for member in doc["Members"]:
        if member["Id"] == "BMC":
            member["Version"] = bmc_version
    return dict(doc)


def _node(engine: Any, bmc: str | None, profile: str = "h100-sxm", name: str = "real-01") -> str:
    bmc_field = f", bmc: '{bmc}'" if bmc else ""
    nodes = f"nodes:\n  - {{name: {name}, address: 10.0.0.1{bmc_field}, profile: {profile}}}\n"
    queries.upsert_nodes(engine, parse_inventory(nodes, allow_http_bmc=True))  # emulators speak http on 127.0.0.1
    return name


def _vbios_checked(engine: Any, node: str) -> None:
    run = CheckRun(
        node_name=node,
        check_name="firmware-inventory",
        kind="firmware",
        status="pass",
        metrics={"components": VBIOS_OK},
        idempotency_key=f"vbios/{node}",
    )
    queries.insert_once(engine, run, CheckRun.idempotency_key, run.idempotency_key)


def _baseline(engine: Any, bmc_version: str) -> int:
    baseline = parse_baseline(H100_BASELINE.format(bmc=bmc_version))
    row = fwdb.set_baseline(engine, baseline.name, baseline.to_dict(), "", "tester")
    assert row.id is not None
    return row.id


class Drift:
    """node_drift as the worker runs it, each call a new activity of one workflow run."""

    def __init__(self, settings: Any) -> None:
        self.activities = FirmwareActivities(settings, executors=None)  # no SSH here
        self.env = ActivityEnvironment()
        self.calls = 0

    def __call__(self, node: str, baseline_id: int) -> Any:
        self.calls += 1
        self.env.info = dataclasses.replace(self.env.info, activity_id=str(self.calls))
        return self.env.run(self.activities.node_drift, DriftRequest(node, baseline_id))


def _bmc_runs(engine: Any, node: str) -> list[CheckRun]:
    return [r for r in reversed(queries.latest_checks(engine, node)) if r.check_name == fwdb.FirmwareSource.BMC.value]


def test_a_bmc_off_the_baseline_drifts_and_one_on_it_does_not(make_settings, sqlite_url) -> None:
    settings = make_settings(sqlite_url)
    settings.bmc_username, settings.bmc_password = "fleetctl", "pw"
    engine = get_engine(sqlite_url)
    drift = Drift(settings)
    with ScriptedRedfish().serving() as bmc:
        node = _node(engine, bmc.base_url)
        _vbios_checked(engine, node)
        baseline_id = _baseline(engine, "1.46.0")
        bmc.script("GET", EXPANDED_INVENTORY, Answer(200, _inventory("1.45.455b66-rev4")))

        behind = drift(node, baseline_id)
        assert (behind.status, behind.drifts) == ("drift", ["BMC: 1.45.455b66-rev4 -> 1.46.0"])

        bmc.script("GET", EXPANDED_INVENTORY, Answer(200, _inventory("1.46.0")))  # the BMC was updated
        assert drift(node, baseline_id).status == "ok"

        # A BMC that cannot be read is recorded as such; the drift stands on the last inventory read.
        bmc.script("GET", EXPANDED_INVENTORY, Answer(500, {"error": {"message": "inventory busy"}}))
        assert drift(node, baseline_id).status == "ok"
    runs = _bmc_runs(engine, node)
    assert [(r.status, r.error_kind) for r in runs] == [("pass", None), ("pass", None), ("error", "bmc")]
    assert "HTTP 500: inventory busy" in runs[-1].reason and settings.bmc_password not in runs[-1].reason
    assert runs[0].metrics["components"]["BMC"] == "1.45.455b66-rev4"


def test_the_bmc_read_takes_a_share_of_the_activitys_own_time(make_settings, sqlite_url) -> None:
    settings = make_settings(sqlite_url)
    engine = get_engine(sqlite_url)
    drift = Drift(settings)
    with ScriptedRedfish().serving() as bmc:
        node = _node(engine, bmc.base_url)
        _vbios_checked(engine, node)
        baseline_id = _baseline(engine, "1.46.0")
        bmc.script("GET", EXPANDED_INVENTORY, Answer(200, _inventory("1.46.0")))
        # An activity with 1 us to run leaves the BMC half of it: less than building a request takes.
        drift.env.info = dataclasses.replace(drift.env.info, start_to_close_timeout=timedelta(microseconds=1))
        late = drift(node, baseline_id)
        assert bmc.requests == []
        drift.env.info = dataclasses.replace(drift.env.info, start_to_close_timeout=None)  # QUICK's 10 s then
        assert drift(node, baseline_id).status == "ok"
    assert (late.status, late.drifts) == ("drift", ["BMC: not reported -> 1.46.0"])
    assert "ran out of time" in _bmc_runs(engine, node)[0].reason


def test_the_emulators_bmc_firmware_is_compared_with_the_baseline(make_settings, sqlite_url, tmp_path) -> None:
    settings = make_settings(sqlite_url)
    engine = get_engine(sqlite_url)
    drift = Drift(settings)
    with run_sushy_emulator(tmp_path) as bmc:
        settings.bmc_username, settings.bmc_password = bmc.username, bmc.password
        node = _node(engine, bmc.base_url)
        _vbios_checked(engine, node)
        on = parse_baseline(H100_BASELINE.replace('"BMC"', '"BMC *"').format(bmc="1.00"))
        on_id = fwdb.set_baseline(engine, on.name, on.to_dict(), "", "tester").id
        ahead = parse_baseline(H100_BASELINE.replace('"BMC"', '"BMC *"').format(bmc="1.01"))
        ahead_id = fwdb.set_baseline(engine, ahead.name, ahead.to_dict(), "", "tester").id
        assert on_id is not None and ahead_id is not None

        assert drift(node, on_id).status == "ok"
        behind = drift(node, ahead_id)
    (line,) = behind.drifts
    assert behind.status == "drift" and line.startswith("BMC ") and line.endswith(": 1.00 -> 1.01")


def test_a_simulated_bmc_adds_nothing(make_settings, sqlite_url) -> None:
    settings = make_settings(sqlite_url)
    engine = get_engine(sqlite_url)
    node = _node(engine, "sim://real-01-bmc")
    _vbios_checked(engine, node)
    baseline = parse_baseline(H100_BASELINE.replace('    "BMC": "{bmc}"\n', ""))
    row = fwdb.set_baseline(engine, baseline.name, baseline.to_dict(), "", "tester")
    assert row.id is not None
    assert Drift(settings)(node, row.id).status == "ok"
    assert _bmc_runs(engine, node) == []


# -- a tray's nvfwupd inventory, recorded by the operator --------------------------------

NVFWUPD_TABLE = FIXTURES / "checks" / "firmware" / "nvfwupd_table_gb200_ok.txt"
GB200_BASELINE = FIXTURES / "firmware" / "gb200-baseline.yaml"


def _cli(db_url: str, *args: str) -> Any:
    return CliRunner().invoke(app, ["--db-url", db_url, "firmware", *args])


def test_an_nvfwupd_inventory_is_compared_with_the_baseline(sqlite_url, tmp_path) -> None:
    engine = get_engine(sqlite_url)
    node = _node(engine, None, profile="gb200", name="tray-01")
    assert _cli(sqlite_url, "baseline", "set", str(GB200_BASELINE)).exit_code == 0

    unknown = _cli(sqlite_url, "status", "-o", "json")
    (row,) = json.loads(unknown.output)["nodes"]
    assert row["firmware"] == "unknown"

    done = _cli(sqlite_url, "report", node, str(NVFWUPD_TABLE))
    assert done.exit_code == 0, done.output
    assert done.output == "tray-01: recorded 32 firmware components, versions consistent (pass)\n"
    (row,) = json.loads(_cli(sqlite_url, "status", "-o", "json").output)["nodes"]
    assert (row["firmware"], row["drift"]) == ("ok", [])

    # The tray's BMC and HMC one release behind: the text of a real table, two versions changed.
    older = NVFWUPD_TABLE.read_text().replace("GB200Nvl-25.01-E", "GB200Nvl-24.10-9")
    (tmp_path / "older.txt").write_text(older)
    assert _cli(sqlite_url, "report", node, str(tmp_path / "older.txt")).exit_code == 0
    (row,) = json.loads(_cli(sqlite_url, "status", "-o", "json").output)["nodes"]
    assert row["firmware"] == "drift"
    assert row["drift"] == [
        {"component": "FW_BMC_0", "actual": "GB200Nvl-24.10-9", "expected": "GB200Nvl-25.01-E"},
        {"component": "HGX_FW_BMC_0", "actual": "GB200Nvl-24.10-9", "expected": "GB200Nvl-25.01-E"},
    ]
    assert fwdb.drifting_nodes(engine, fwdb_baseline(engine)) == [node]  # what a roll-out would update


def fwdb_baseline(engine: Any) -> Any:
    from fleetctl.remediation.firmware import Baseline

    row = fwdb.current_baseline(engine)
    assert row is not None
    return Baseline.from_dict(row.document)


def test_a_bad_report_is_one_line_and_records_nothing(sqlite_url, tmp_path) -> None:
    engine = get_engine(sqlite_url)
    node = _node(engine, None, profile="gb200", name="tray-01")
    cut = "\n".join(NVFWUPD_TABLE.read_text().splitlines()[:20])  # cut short before its closing dashes
    (tmp_path / "cut.txt").write_text(cut)
    for args, message in (
        ([node, str(tmp_path / "cut.txt")], "not a firmware inventory: nvfwupd table not closed"),
        ([node, str(tmp_path / "missing.txt")], "cannot read"),
        (["tray-99", str(NVFWUPD_TABLE)], "unknown node: tray-99"),
    ):
        done = _cli(sqlite_url, "report", *args)
        assert done.exit_code != 0 and message in done.output and len(done.output.strip().splitlines()) == 1
    assert queries.latest_checks(engine, node) == []
