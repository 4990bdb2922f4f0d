"""RedfishClient against sushy-tools' emulator, and a scripted service for what it lacks."""

from __future__ import annotations

import base64
import json
import logging
import re
import traceback
from pathlib import Path
from typing import Any

import pytest

from fleetctl.bmc.redfish import (
    BmcAuthFailed,
    BmcError,
    BmcUnreachable,
    FirmwareComponent,
    RedfishClient,
    TaskResult,
    validate_image_uri,
)
from fleetctl.checks.firmware import parse_firmware
from tests.bmc.redfish_stub import Answer, ScriptedRedfish
from tests.bmc.sushy_emulator import RESET_TAKES_AT_MOST_S, SYSTEM_NAME, RedfishBmc, free_port

IMAGE = "https://firmware.example/h100/bmc-1.2.bin"
SIMPLE_UPDATE = "/redfish/v1/UpdateService/Actions/UpdateService.SimpleUpdate"
UPDATE_SERVICE_BODY = {"Actions": {"#UpdateService.SimpleUpdate": {"target": SIMPLE_UPDATE}}}


# -- against sushy-tools' emulator ---------------------------------------------------


def test_reads_system_identity_and_power_state(redfish_bmc: RedfishBmc) -> None:
    client = redfish_bmc.client()

    assert client.systems() == [redfish_bmc.system_id]
    info = client.system_info(redfish_bmc.system_id)
    assert (info.id, info.uuid, info.name) == (redfish_bmc.system_id, redfish_bmc.system_id, SYSTEM_NAME)
    assert info.power_state == "On"
    assert info.boot_id is None  # the fake driver reports neither LastResetTime nor BootProgress
    assert client.power_state(redfish_bmc.system_id) == "On"


def test_reboot_waits_for_power_off_and_on_again(redfish_bmc: RedfishBmc) -> None:
    client = redfish_bmc.client()

    info = client.reboot(redfish_bmc.system_id, timeout_s=2 * RESET_TAKES_AT_MOST_S, poll_s=0.2)

    assert info.power_state == "On"
    assert redfish_bmc.reset_requests() == ["ForceRestart"]
    assert redfish_bmc.power_history() == ["On", "Off", "On"]


def test_reset_reaches_the_bmc_and_bad_reset_types_do_not(redfish_bmc: RedfishBmc) -> None:
    client = redfish_bmc.client()

    # What the BMC did, from its own notifications: the restart was accepted and the system
    # went Off at once (it comes back On 0-11 s later; the reboot test above waits that out).
    client.reset(redfish_bmc.system_id, "ForceRestart")
    assert redfish_bmc.reset_requests() == ["ForceRestart"]
    assert redfish_bmc.power_history() == ["On", "Off"]
    with pytest.raises(ValueError, match="unknown Redfish ResetType"):
        client.reset(redfish_bmc.system_id, "Explode")
    assert redfish_bmc.reset_requests() == ["ForceRestart"]


def test_emulator_has_no_firmware_inventory(redfish_bmc: RedfishBmc) -> None:
    with pytest.raises(BmcError, match=r"GET /redfish/v1/UpdateService/FirmwareInventory: HTTP 404"):
        redfish_bmc.client().firmware_inventory()


def test_emulator_simple_update_failure_is_one_readable_line(redfish_bmc: RedfishBmc) -> None:
    client = redfish_bmc.client()

    with pytest.raises(BmcError) as raised:
        client.simple_update(IMAGE, targets=[f"/redfish/v1/Systems/{redfish_bmc.system_id}"])

    assert str(raised.value) == (
        f"BMC {redfish_bmc.base_url}: POST {SIMPLE_UPDATE}: HTTP 500: Failed fetching BIOS information"
    )


def test_polls_the_emulators_task_to_completion(redfish_bmc: RedfishBmc) -> None:
    result = redfish_bmc.client().wait_for_task("/redfish/v1/TaskService/Tasks/42", timeout_s=5, poll_s=0.1)

    assert result == TaskResult(uri="/redfish/v1/TaskService/Tasks/42", state="Completed", status="OK")


def test_wrong_password_is_auth_failed(redfish_bmc: RedfishBmc) -> None:
    client = RedfishClient(redfish_bmc.base_url, redfish_bmc.username, "not-the-password")

    with pytest.raises(BmcAuthFailed, match=r"HTTP 401: the BMC rejected the credentials of user 'fleetctl'"):
        client.power_state(redfish_bmc.system_id)


def test_closed_port_is_unreachable() -> None:
    client = RedfishClient(f"http://127.0.0.1:{free_port()}", "fleetctl", "pw", timeout_s=2)

    with pytest.raises(BmcUnreachable, match=r"unreachable: .*[Rr]efused"):
        client.systems()


def test_credentials_appear_in_no_log_error_or_repr(redfish_bmc: RedfishBmc, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    wrong_password = "Wr0ng-" + redfish_bmc.password
    good = redfish_bmc.client()
    wrong = RedfishClient(redfish_bmc.base_url, redfish_bmc.username, wrong_password)
    unreachable = RedfishClient(f"http://127.0.0.1:{free_port()}", redfish_bmc.username, redfish_bmc.password)

    good.system_info(redfish_bmc.system_id)
    good.reset(redfish_bmc.system_id, "ForceRestart")
    errors: list[BaseException] = []
    for failing_call in (
        wrong.systems,
        lambda: good.simple_update(IMAGE, targets=[f"/redfish/v1/Systems/{redfish_bmc.system_id}"]),
        unreachable.systems,
    ):
        with pytest.raises(BmcError) as raised:
            failing_call()
        errors.append(raised.value)

    assert [type(error) for error in errors] == [BmcAuthFailed, BmcError, BmcUnreachable]
    texts = [caplog.text, *(record.getMessage() for record in caplog.records)]
    texts += [repr(client) for client in (good, wrong, unreachable)]
    for error in errors:
        texts += [str(error), repr(error), "".join(traceback.format_exception(error))]
    for password in (redfish_bmc.password, wrong_password):
        token = base64.b64encode(f"{redfish_bmc.username}:{password}".encode()).decode()
        for text in texts:
            assert password not in text
            assert token not in text


# -- image URL validation --------------------------------------------------------------


def test_image_uri_gives_its_transfer_protocol() -> None:
    assert validate_image_uri("http://repo.mgmt:8080/fw/gpu.bin") == "HTTP"
    assert validate_image_uri(IMAGE) == "HTTPS"


@pytest.mark.parametrize(
    "image_uri",
    [
        "ftp://repo/fw.bin",
        "file:///etc/shadow",
        "repo/fw.bin",
        "http:///fw.bin",
        "http://repo/fw bin",
        "http://repo/fw.bin\n",
        "http://repo/fw.bin\x00",
        "http://repo/\u200bfw.bin",
    ],
)
def test_unsafe_image_uris_never_reach_the_bmc(scripted_redfish: ScriptedRedfish, image_uri: str) -> None:
    client = RedfishClient(scripted_redfish.base_url, "fleetctl", "pw")

    with pytest.raises(ValueError, match="firmware image URL"):
        client.simple_update(image_uri)
    assert scripted_redfish.requests == []


# -- against the scripted service ------------------------------------------------------


def test_firmware_inventory_lists_name_version_and_updateable(scripted_redfish: ScriptedRedfish) -> None:
    inventory = "/redfish/v1/UpdateService/FirmwareInventory"
    scripted_redfish.script(
        "GET",
        inventory,
        Answer(200, {"Members": [{"@odata.id": f"{inventory}/BMC"}, {"@odata.id": f"{inventory}/GPU0"}]}),
    )
    scripted_redfish.script(
        "GET",
        f"{inventory}/BMC",
        Answer(200, {"Id": "BMC", "Name": "BMC firmware", "Version": "1.1", "Updateable": True}),
    )
    scripted_redfish.script("GET", f"{inventory}/GPU0", Answer(200, {"Name": "GPU0 VBIOS", "Version": "96.00.89"}))

    components = RedfishClient(scripted_redfish.base_url, "fleetctl", "pw").firmware_inventory()

    assert components == [
        FirmwareComponent(uri=f"{inventory}/BMC", id="BMC", name="BMC firmware", version="1.1", updateable=True),
        FirmwareComponent(uri=f"{inventory}/GPU0", id="GPU0", name="GPU0 VBIOS", version="96.00.89", updateable=None),
    ]


def test_simple_update_is_sent_and_its_task_polled_to_completion(scripted_redfish: ScriptedRedfish) -> None:
    task = "/redfish/v1/TaskService/Tasks/7"
    scripted_redfish.script("GET", "/redfish/v1/UpdateService", Answer(200, UPDATE_SERVICE_BODY))
    scripted_redfish.script("POST", SIMPLE_UPDATE, Answer(202, None, {"Location": task}))
    scripted_redfish.script(
        "GET",
        task,
        Answer(200, {"TaskState": "Running", "PercentComplete": 10}),
        Answer(200, {"TaskState": "Running", "PercentComplete": 60}),
        Answer(200, {"TaskState": "Completed", "TaskStatus": "OK", "Messages": [{"Message": "Update applied."}]}),
    )
    client = RedfishClient(scripted_redfish.base_url, "fleetctl", "pw")

    started = client.simple_update(IMAGE, targets=["/redfish/v1/UpdateService/FirmwareInventory/BMC"])
    assert started == task
    result = client.wait_for_task(task, timeout_s=5, poll_s=0.01)

    assert result == TaskResult(uri=task, state="Completed", status="OK", messages=("Update applied.",))
    assert scripted_redfish.requests[1].body == {
        "ImageURI": IMAGE,
        "TransferProtocol": "HTTPS",
        "Targets": ["/redfish/v1/UpdateService/FirmwareInventory/BMC"],
    }
    assert [request.path for request in scripted_redfish.requests].count(task) == 3


def test_simple_update_prefers_the_task_in_its_answer_over_a_task_monitor(
    scripted_redfish: ScriptedRedfish,
) -> None:
    scripted_redfish.script("GET", "/redfish/v1/UpdateService", Answer(200, UPDATE_SERVICE_BODY))
    scripted_redfish.script(
        "POST",
        SIMPLE_UPDATE,
        Answer(
            202,
            {"@odata.id": "/redfish/v1/TaskService/Tasks/3", "TaskState": "New"},
            {"Location": "/redfish/v1/TaskService/Tasks/3/Monitor"},
        ),
    )

    assert RedfishClient(scripted_redfish.base_url, "u", "pw").simple_update(IMAGE) == "/redfish/v1/TaskService/Tasks/3"


def test_failed_task_raises_with_its_messages(scripted_redfish: ScriptedRedfish) -> None:
    task = "/redfish/v1/TaskService/Tasks/8"
    scripted_redfish.script(
        "GET",
        task,
        Answer(200, {"TaskState": "Running"}),
        Answer(
            200,
            {
                "TaskState": "Exception",
                "TaskStatus": "Critical",
                "Messages": [{"Message": "Image signature\n check failed."}, {"Message": "Rolled back."}],
            },
        ),
    )

    with pytest.raises(BmcError) as raised:
        RedfishClient(scripted_redfish.base_url, "u", "pw").wait_for_task(task, timeout_s=5, poll_s=0.01)

    assert str(raised.value).endswith(f"task {task} ended Exception: Image signature check failed.; Rolled back.")


def test_task_that_never_finishes_times_out(scripted_redfish: ScriptedRedfish) -> None:
    task = "/redfish/v1/TaskService/Tasks/9"
    scripted_redfish.script("GET", task, Answer(200, {"TaskState": "Running"}))

    with pytest.raises(BmcError, match=re.escape(f"task {task} still Running after 0.2s")):
        RedfishClient(scripted_redfish.base_url, "u", "pw").wait_for_task(task, timeout_s=0.2, poll_s=0.05)


def test_redirect_on_the_bmcs_own_origin_is_followed(scripted_redfish: ScriptedRedfish) -> None:
    scripted_redfish.script("GET", "/redfish/v1/Systems", Answer(301, None, {"Location": "/redfish/v1/Systems/"}))
    scripted_redfish.script(
        "GET", "/redfish/v1/Systems/", Answer(200, {"Members": [{"@odata.id": "/redfish/v1/Systems/1"}]})
    )

    assert RedfishClient(scripted_redfish.base_url, "u", "pw").systems() == ["1"]


def test_links_and_redirects_to_another_host_are_not_followed(scripted_redfish: ScriptedRedfish) -> None:
    elsewhere = f"http://127.0.0.1:{free_port()}/steal"
    scripted_redfish.script("GET", "/redfish/v1/Systems", Answer(307, None, {"Location": elsewhere}))
    client = RedfishClient(scripted_redfish.base_url, "u", "pw")

    with pytest.raises(BmcError, match=r"HTTP 307: redirect not followed \(another host"):
        client.systems()
    with pytest.raises(BmcError, match="refusing to follow a link to another host"):
        client.wait_for_task(elsewhere, timeout_s=1, poll_s=0.1)


def test_reboot_detects_a_new_boot_by_its_boot_id(scripted_redfish: ScriptedRedfish) -> None:
    system = "/redfish/v1/Systems/1"
    reset = f"{system}/Actions/ComputerSystem.Reset"
    before = {
        "Id": "1",
        "PowerState": "On",
        "LastResetTime": "2026-01-01T00:00:00Z",
        "Actions": {"#ComputerSystem.Reset": {"target": reset}},
    }
    after = {**before, "LastResetTime": "2026-01-02T08:00:00Z"}
    # Power never reads Off here: a fast restart that only the boot id reveals.
    scripted_redfish.script(
        "GET", system, Answer(200, before), Answer(200, before), Answer(200, before), Answer(200, after)
    )
    scripted_redfish.script("POST", reset, Answer(204))

    info = RedfishClient(scripted_redfish.base_url, "u", "pw").reboot("1", timeout_s=5, poll_s=0.01)

    assert info.boot_id == "2026-01-02T08:00:00Z"
    assert [r.body for r in scripted_redfish.requests if r.method == "POST"] == [{"ResetType": "ForceRestart"}]


def test_reboot_that_never_happens_times_out(scripted_redfish: ScriptedRedfish) -> None:
    system = "/redfish/v1/Systems/1"
    reset = f"{system}/Actions/ComputerSystem.Reset"
    scripted_redfish.script(
        "GET",
        system,
        Answer(
            200,
            {
                "PowerState": "On",
                "BootProgress": {"LastState": "OSRunning", "LastStateTime": "t1"},
                "Actions": {"#ComputerSystem.Reset": {"target": reset}},
            },
        ),
    )
    scripted_redfish.script("POST", reset, Answer(204))

    with pytest.raises(BmcError, match=r"system 1 did not boot again within 0\.2s after ForceRestart"):
        RedfishClient(scripted_redfish.base_url, "u", "pw").reboot("1", timeout_s=0.2, poll_s=0.05)


# -- the firmware report the drift reads (checks.firmware parses it) ------------------

FIRMWARE_FIXTURES = Path(__file__).parents[1] / "fixtures" / "checks" / "firmware"
EXPANDED_INVENTORY = "/redfish/v1/UpdateService/FirmwareInventory?$expand=.($levels=1)"


def _fixture_json(name: str) -> dict[str, Any]:
    """A fixture's JSON document, its source header left out."""
    text = (FIRMWARE_FIXTURES / name).read_text()
    return dict(json.loads("".join(line for line in text.splitlines(True) if not line.startswith("#"))))


def test_emulator_firmware_report_is_its_managers_firmware(redfish_bmc: RedfishBmc) -> None:
    # sushy-tools serves no FirmwareInventory (404); its Manager's FirmwareVersion is the BMC's.
    report = redfish_bmc.client().firmware_report(timeout_s=10.0)

    components, findings = parse_firmware(report)
    ((name, version),) = components.items()
    assert name.startswith("BMC ") and version == "1.00" and findings == []


def test_firmware_report_takes_an_expanded_inventory_in_one_read(scripted_redfish: ScriptedRedfish) -> None:
    scripted_redfish.script("GET", EXPANDED_INVENTORY, Answer(200, _fixture_json("redfish_expanded_ok.txt")))

    report = RedfishClient(scripted_redfish.base_url, "fleetctl", "pw").firmware_report(timeout_s=10.0)

    components, _ = parse_firmware(report)
    assert components["BMC"] == "1.45.455b66-rev4" and components["HGX_FW_GPU_SXM_1"] == "96.00.99.00.01"
    assert [r.path for r in scripted_redfish.requests] == [EXPANDED_INVENTORY]


def test_firmware_report_reads_linked_members_one_by_one(scripted_redfish: ScriptedRedfish) -> None:
    inventory = "/redfish/v1/UpdateService/FirmwareInventory"
    expanded = _fixture_json("redfish_expanded_ok.txt")
    links = {"Members": [{"@odata.id": m["@odata.id"]} for m in expanded["Members"]]}  # $expand ignored
    scripted_redfish.script("GET", EXPANDED_INVENTORY, Answer(200, links))
    for member in expanded["Members"]:
        scripted_redfish.script("GET", member["@odata.id"], Answer(200, member))

    report = RedfishClient(scripted_redfish.base_url, "fleetctl", "pw").firmware_report(timeout_s=10.0)

    assert parse_firmware(report)[0]["BIOS"] == "P79 v2.34 (11/02/2024)"
    assert len(scripted_redfish.requests) == 1 + len(expanded["Members"])
    assert scripted_redfish.requests[1].path == f"{inventory}/BMC"


def test_firmware_report_gives_up_at_its_deadline(scripted_redfish: ScriptedRedfish) -> None:
    with pytest.raises(BmcUnreachable, match="not sent: the read ran out of time"):
        RedfishClient(scripted_redfish.base_url, "fleetctl", "pw").firmware_report(timeout_s=0.0)
    assert scripted_redfish.requests == []


def test_firmware_report_passes_on_other_errors(scripted_redfish: ScriptedRedfish) -> None:
    scripted_redfish.script("GET", EXPANDED_INVENTORY, Answer(500, {"error": {"message": "inventory busy"}}))

    with pytest.raises(BmcError, match="HTTP 500: inventory busy"):
        RedfishClient(scripted_redfish.base_url, "fleetctl", "pw").firmware_report(timeout_s=10.0)
    assert all("Managers" not in r.path for r in scripted_redfish.requests)  # no fallback for a failing BMC
