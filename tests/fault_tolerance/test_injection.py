"""No shell injection through what operators, runbooks and baselines write: a drain reason on
its way to Slurm's `scontrol ... Reason=`, a runbook parameter rendered into a command run
over SSH, a firmware image in an SSH update template or a Redfish SimpleUpdate. Each try
plants every shell trick at once; no sentinel file may appear, and the value either arrives
verbatim (as one argument, one field) or is refused with a clear error."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
import yaml

from fleetctl.bmc.redfish import RedfishClient
from fleetctl.db import queries
from fleetctl.db.engine import get_engine
from fleetctl.remediation.events import Event
from fleetctl.remediation.firmware import parse_baseline, update_argv
from fleetctl.remediation.runbooks import parse_runbook
from fleetctl.workflows.client import connect, ensure_node_workflows, request_transition, start_remediation
from tests.bmc.conftest import scripted_redfish  # noqa: F401 - fixture used here
from tests.bmc.redfish_stub import Answer, ScriptedRedfish
from tests.schedulers.conftest import slurm, slurm_cluster  # noqa: F401 - fixtures used here
from tests.support.fleet import Cli, wait_for
from tests.support.jobs import import_slurm_nodes
from tests.support.worker import WorkerThread, terminate_node_workflows

SIMPLE_UPDATE = "/redfish/v1/UpdateService/Actions/UpdateService.SimpleUpdate"


def hostile(sentinel: Path) -> str:
    """Every way a shell could be talked into running `touch sentinel`, in one value."""
    return (
        f"optics $(touch {sentinel}) `touch {sentinel}` ; touch {sentinel} | touch {sentinel} "
        f"&& touch {sentinel} > {sentinel} ' \" State=RESUME"
    )


@pytest.mark.slurm
@pytest.mark.temporal
async def test_drain_reason_reaches_slurm_verbatim(
    slurm_cluster,
    slurm,
    make_settings,
    sqlite_url,
    tmp_path,
) -> None:
    sentinel = tmp_path / "injected"
    settings = make_settings(sqlite_url)
    settings.slurm_conf = str(slurm_cluster.conf_path)
    settings.runbooks_dir = str(tmp_path)  # no runbook: the node waits in maintenance
    node = slurm_cluster.node_names[0]
    engine = get_engine(sqlite_url)
    import_slurm_nodes(engine, [node])
    worker = WorkerThread(settings).start()
    try:
        client = await connect(settings)
        await ensure_node_workflows(client, settings, [(node, "new", 0)])
        for trigger in ("begin_burn_in", "begin_admission", "enter_production"):
            await request_transition(client, node, trigger, "setup", actor_kind="automation")
        reason = hostile(sentinel)
        result = await asyncio.to_thread(Cli(settings), "node", "drain", node, "--reason", reason)
        assert result.exit_code == 0, result.output
        await wait_for(lambda: queries.get_node(engine, node).state == "maintenance", 30, "the drain")
    finally:
        await terminate_node_workflows(settings, [node])
        worker.stop()
    in_slurm = slurm.node_state(node)
    assert in_slurm.drained and in_slurm.reason == f"fleetctl: operator: {reason}"
    assert not sentinel.exists()


@pytest.mark.sshd
@pytest.mark.temporal
async def test_runbook_parameter_reaches_the_node_as_one_argument(ssh_fleet, tmp_path) -> None:
    sentinel = tmp_path / "injected"
    fleet = await ssh_fleet(1)
    (name,) = fleet.names
    for trigger in ("begin_burn_in", "phase_failed"):  # in maintenance, where runbooks act
        await request_transition(fleet.client, name, trigger, "setup", actor_kind="automation")
    fleet.node.set_tool_output("nvidia-smi", "")  # no compute process: the GPU is idle
    book = parse_runbook("""
name: reset-the-gpu-the-event-names
match: {xid: [48]}
steps:
  - action: gpu_reset
    with: {gpu: "{{ event.message }}", idle_timeout: 5s}
""")
    message = hostile(sentinel)
    handle = await start_remediation(
        fleet.client, fleet.settings, name, book, Event("xid", code=48, message=message), "tester"
    )
    result = await asyncio.wait_for(handle.result(), 60)
    assert [s.status for s in result.steps] == ["passed"], result
    assert ["-r", "-i", message] in fleet.node.tool_calls("nvidia-smi")
    assert not sentinel.exists()


@pytest.mark.sshd
def test_firmware_ssh_update_template_value_is_one_argument(ssh_node, tmp_path) -> None:
    sentinel = tmp_path / "injected"
    image = f"/opt/fw/cx7.bin{hostile(sentinel)}"
    baseline = parse_baseline(
        yaml.safe_dump(
            {
                "name": "hostile",
                "profiles": {
                    "h100-sxm": {
                        "ConnectX-7 *": {
                            "version": "28.39.1002",
                            "update": {"ssh": "nvidia-smi -u -y -i {{ image }} --log {{ node }}.log", "image": image},
                        }
                    }
                },
            }
        )
    )
    spec = baseline.profiles["h100-sxm"][0]
    argv = update_argv(spec, {"node": f"gpu-01$(touch {sentinel})"})
    with ssh_node.executor() as executor:
        assert executor.run(ssh_node.target(), argv, timeout_s=10).exit_status == 0
    assert ssh_node.tool_calls("nvidia-smi") == [["-u", "-y", "-i", image, "--log", f"gpu-01$(touch {sentinel}).log"]]
    assert not sentinel.exists()


def test_firmware_redfish_image_url_is_sent_verbatim_or_refused(
    scripted_redfish: ScriptedRedfish,
    tmp_path,
) -> None:
    sentinel = tmp_path / "injected"
    spaced = hostile(sentinel)
    with pytest.raises(ValueError, match="must not contain whitespace"):
        parse_baseline(
            yaml.safe_dump(
                {
                    "name": "x",
                    "profiles": {
                        "h100-sxm": {
                            "GPU *": {"version": "1", "update": {"redfish": {"image": f"https://fw.example/{spaced}"}}}
                        }
                    },
                }
            )
        )
    # Without whitespace the URL is legal: it reaches the BMC as one JSON string, unchanged.
    image = f"https://fw.example/vbios$(touch%20{sentinel});`id`|x.fwpkg"
    scripted_redfish.script(
        "GET",
        "/redfish/v1/UpdateService",
        Answer(200, {"Actions": {"#UpdateService.SimpleUpdate": {"target": SIMPLE_UPDATE}}}),
    )
    scripted_redfish.script("POST", SIMPLE_UPDATE, Answer(202, None, {"Location": "/redfish/v1/TaskService/Tasks/1"}))
    RedfishClient(scripted_redfish.base_url, "fleetctl", "pw").simple_update(image)
    (post,) = [r for r in scripted_redfish.requests if r.method == "POST"]
    assert post.body["ImageURI"] == image
    assert not sentinel.exists()
