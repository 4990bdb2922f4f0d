"""Real-node hardware actions against Redfish: a reboot is verified by a new boot id and by
the BMC's own record of the reset (sushy-tools' emulator), a firmware update goes through
SimpleUpdate (scripted BMC)."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest
from temporalio.testing import ActivityEnvironment

from fleetctl.db import firmware as fwdb
from fleetctl.db import queries
from fleetctl.db.engine import get_engine
from fleetctl.db.models import CheckRun
from fleetctl.executors.base import CommandResult, NodeUnreachable
from fleetctl.inventory.parse import parse_inventory
from fleetctl.remediation.firmware import load_baseline
from fleetctl.workflows.activities import remediation as remediation_activities
from fleetctl.workflows.activities.firmware import FirmwareActivities
from fleetctl.workflows.activities.remediation import RemediationActivities
from fleetctl.workflows.api import DriftRequest, HardwareRequest
from tests.bmc.redfish_stub import Answer, ScriptedRedfish
from tests.bmc.sushy_emulator import RESET_TAKES_AT_MOST_S, RedfishBmc, run_sushy_emulator
from tests.firmware.test_baseline import FIXTURE


@dataclass
class FakeNode:
    """A node's shell as seen over SSH that answers every command with one line."""

    answer: str
    commands: list[list[str]] = field(default_factory=list)

    def for_target(self, _target):
        return self

    def run(self, target, argv, timeout_s):
        self.commands.append(list(argv))
        return CommandResult(tuple(argv), 0, self.answer + "\n", "", 0.01)


@dataclass
class NodeBehindBmc:
    """A real node's shell as seen over SSH, powered by the emulated BMC: it does not
    answer while the BMC has it Off, and every power-on boots it with a new boot id. Only
    the BMC's own record of its power states (its notifications) moves it."""

    bmc: RedfishBmc
    commands: list[list[str]] = field(default_factory=list)

    def for_target(self, _target):
        return self

    def run(self, target, argv, timeout_s):
        self.commands.append(list(argv))
        history = self.bmc.power_history()
        if history[-1] != "On":
            raise NodeUnreachable(target.name, "no route to host (powered off)")
        boot_id = f"boot-{history.count('On')}"
        return CommandResult(tuple(argv), 0, boot_id + "\n", "", 0.01)


def _node(settings, bmc_url: str) -> str:
    queries.upsert_nodes(
        get_engine(settings.db_url),
        parse_inventory(
            f"nodes:\n  - {{name: real-01, address: 10.0.0.1, bmc: '{bmc_url}', profile: h100-sxm}}\n",
            allow_http_bmc=True,
        ),
    )  # the emulators speak plain http on 127.0.0.1
    return "real-01"


def test_reboot_through_the_bmc_is_verified_by_the_boot_id(make_settings, sqlite_url, tmp_path, monkeypatch) -> None:
    monkeypatch.setattr(remediation_activities, "POLL_S", 0.2)
    settings = make_settings(sqlite_url)
    with run_sushy_emulator(tmp_path) as bmc:
        settings.bmc_username, settings.bmc_password, settings.bmc_verify_tls = bmc.username, bmc.password, False
        node = _node(settings, bmc.base_url)
        acts = RemediationActivities(settings, NodeBehindBmc(bmc))
        # Room for the emulator's slowest power cycle, twice: a reboot that never resets fails in that time.
        timeout_s = 2 * RESET_TAKES_AT_MOST_S
        done = ActivityEnvironment().run(acts.reboot, HardwareRequest(node, "reboot", {"timeout": timeout_s}))
        assert done.ok, done.detail
        assert bmc.reset_requests() == ["ForceRestart"]
        assert bmc.power_history() == ["On", "Off", "On"]
        assert "boot id boot-1 -> boot-2" in done.detail
        assert bmc.password not in done.detail


@dataclass
class RebootingNode:
    """A node that answers one boot id before the reset and another after it."""

    boot_ids: list[str]

    def for_target(self, _target):
        return self

    def run(self, target, argv, timeout_s):
        return CommandResult(
            tuple(argv), 0, (self.boot_ids.pop(0) if len(self.boot_ids) > 1 else self.boot_ids[0]) + "\n", "", 0.01
        )


def _bmc_that_never_shows_off(stub: ScriptedRedfish) -> None:
    """A BMC without a boot identity whose Off was shorter than a poll: it only ever says On."""
    stub.script("GET", "/redfish/v1/Systems", Answer(200, {"Members": [{"@odata.id": "/redfish/v1/Systems/1"}]}))
    reset = "/redfish/v1/Systems/1/Actions/ComputerSystem.Reset"
    stub.script(
        "GET",
        "/redfish/v1/Systems/1",
        Answer(200, {"Id": "1", "PowerState": "On", "Actions": {"#ComputerSystem.Reset": {"target": reset}}}),
    )
    stub.script("POST", reset, Answer(204))


@pytest.mark.parametrize(
    "boot_ids, ok",
    [
        (["boot-1", "boot-2"], True),  # the node's new boot id proves the reboot the BMC did not show
        (["boot-1"], False),  # same boot id: not rebooted, whatever the BMC accepted
    ],
)
def test_a_reboot_the_bmc_did_not_show_is_judged_by_the_node(
    make_settings, sqlite_url, monkeypatch, boot_ids, ok
) -> None:
    monkeypatch.setattr(remediation_activities, "POLL_S", 0.05)
    settings = make_settings(sqlite_url)
    with ScriptedRedfish().serving() as stub:
        _bmc_that_never_shows_off(stub)
        settings.bmc_username, settings.bmc_password, settings.bmc_allow_http = "fleetctl", "pw", True
        node = _node(settings, stub.base_url)
        done = ActivityEnvironment().run(
            RemediationActivities(settings, RebootingNode(boot_ids)).reboot,
            HardwareRequest(node, "reboot", {"timeout": 1}),
        )
    assert done.ok is ok, done.detail
    assert [r.body for r in stub.requests if r.method == "POST"] == [{"ResetType": "ForceRestart"}]
    if ok:
        assert "boot id boot-1 -> boot-2" in done.detail and "the BMC showed no boot" in done.detail
    else:
        assert "did not come back" in done.detail and "boot id unchanged" in done.detail


def test_firmware_update_through_redfish_simple_update(make_settings, sqlite_url) -> None:
    settings = make_settings(sqlite_url)
    engine = get_engine(sqlite_url)
    with ScriptedRedfish().serving() as stub:
        settings.bmc_username, settings.bmc_password = "fleetctl", "pw"
        node = _node(settings, stub.base_url)
        action = "/redfish/v1/UpdateService/Actions/UpdateService.SimpleUpdate"
        stub.script(
            "GET",
            "/redfish/v1/UpdateService",
            Answer(200, {"Actions": {"#UpdateService.SimpleUpdate": {"target": action}}}),
        )
        stub.script("POST", action, Answer(202, None, {"Location": "/redfish/v1/TaskService/Tasks/1"}))
        stub.script(
            "GET",
            "/redfish/v1/TaskService/Tasks/1",
            Answer(200, {"@odata.id": "/redfish/v1/TaskService/Tasks/1", "TaskState": "Completed", "TaskStatus": "OK"}),
        )
        baseline = load_baseline(FIXTURE)
        row = fwdb.set_baseline(engine, baseline.name, baseline.to_dict(), "", "tester")
        queries.insert_once(
            engine,
            CheckRun(
                node_name=node,
                check_name="firmware-inventory",
                kind="firmware",
                status="pass",
                metrics={"components": {f"GPU {i} VBIOS": "96.00.74.00.01" for i in range(8)}},
                idempotency_key="k1",
            ),
            CheckRun.idempotency_key,
            "k1",
        )
        queries.insert_once(
            engine,
            CheckRun(
                node_name=node,
                check_name="nic-firmware",
                kind="firmware",
                status="pass",
                metrics={"components": {"ConnectX7 /dev/mst/mt4129_pciconf0": "28.41.1000"}},
                idempotency_key="k2",
            ),
            CheckRun.idempotency_key,
            "k2",
        )
        done = ActivityEnvironment().run(
            FirmwareActivities(settings, FakeNode("x")).apply_updates, DriftRequest(node, row.id)
        )
    assert done.ok, done.detail
    assert done.detail == "GPU * VBIOS -> 96.00.99.00.01"  # one SimpleUpdate for all eight GPUs; the NICs match
    (post,) = [r for r in stub.requests if r.method == "POST"]
    assert post.body == {
        "ImageURI": "https://fw.example.net/h100/vbios-96.00.99.00.01.fwpkg",
        "TransferProtocol": "HTTPS",
    }
