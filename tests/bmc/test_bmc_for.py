"""The BMC of a node, chosen by its inventory `bmc` address; the simulated BMC's repairs."""

from __future__ import annotations

import pytest

from fleetctl.bmc import bmc_for
from fleetctl.bmc.redfish import RedfishBmc
from fleetctl.config import Settings
from fleetctl.db.engine import get_engine
from fleetctl.executors.base import NodeTarget
from fleetctl.sim import store
from fleetctl.sim.bmc import SimBmc
from fleetctl.sim.executor import SimExecutor

BOOT_ID = ["cat", "/proc/sys/kernel/random/boot_id"]


@pytest.mark.parametrize(
    "address, url", [("10.1.0.7", "https://10.1.0.7"), ("http://127.0.0.1:8000", "http://127.0.0.1:8000")]
)
def test_a_plain_or_http_address_is_redfish(address: str, url: str) -> None:
    bmc = bmc_for("gpu-01", address, Settings(bmc_username="u", bmc_password="secret"))
    assert isinstance(bmc, RedfishBmc) and bmc.client.base_url == url
    assert "secret" not in repr(bmc)


def test_an_address_redfish_cannot_use_is_refused() -> None:
    with pytest.raises(ValueError, match="http"):
        bmc_for("gpu-01", "ftp://10.1.0.7", Settings())


def test_a_sim_address_is_the_simulated_bmc(sqlite_url) -> None:
    bmc = bmc_for("gpu-01", "sim://gpu-01-bmc", Settings(db_url=sqlite_url))
    assert isinstance(bmc, SimBmc) and bmc.node == "gpu-01"


def _sim_node(engine, clock):
    ex = SimExecutor(
        lambda name: store.fault_specs(engine, name),
        seed=3,
        now=lambda: clock[0],
        booted_at=lambda name: store.booted_at(engine, name),
        cure=lambda name, kinds: store.cure(engine, name, kinds),
    )
    target = NodeTarget("gpu-01", "sim://gpu-01", profile="h100-sxm")
    return lambda argv: ex.run(target, argv, 60)


def test_simulated_reboot_cures_what_a_reboot_cures_and_changes_the_boot_id(sqlite_url) -> None:
    engine = get_engine(sqlite_url)
    clock = [1_750_000_000.0]
    run = _sim_node(engine, clock)
    for kind in ("xid79", "ib-port-down"):
        store.add_fault(engine, "gpu-01", kind, gpu=2)
    before = run(BOOT_ID).stdout
    assert run(BOOT_ID).stdout == before  # stable while the node is up

    SimBmc(engine, "gpu-01", now=lambda: clock[0] + 5).reboot("ForceRestart", timeout_s=60, poll_s=1)
    assert run(BOOT_ID).stdout == before  # not booted yet at the node's clock
    clock[0] += 10
    after = run(BOOT_ID).stdout
    assert after != before and len(after.strip()) == 36
    assert [f.kind for f in store.faults_for(engine, "gpu-01")] == ["ib-port-down"]  # a reboot does not fix a port
    assert "Linux version" in run(["dmesg"]).stdout.splitlines()[0] and "[    0.000000]" in run(["dmesg"]).stdout


def test_simulated_reboot_refuses_an_unknown_reset_type(sqlite_url) -> None:
    engine = get_engine(sqlite_url)
    store.add_fault(engine, "gpu-01", "xid79")
    with pytest.raises(ValueError, match="ResetType"):
        SimBmc(engine, "gpu-01").reboot("Explode", timeout_s=60, poll_s=1)
    assert [f.kind for f in store.faults_for(engine, "gpu-01")] == ["xid79"]


def test_simulated_gpu_reset_and_firmware_updates_cure_their_faults(sqlite_url) -> None:
    engine = get_engine(sqlite_url)
    run = _sim_node(engine, [1_750_000_000.0])
    store.add_fault(engine, "gpu-01", "row-remap-pending", gpu=4)
    store.add_fault(engine, "gpu-01", "firmware-drift")
    reset = run(["nvidia-smi", "-r", "-i", "4"])
    assert reset.exit_status == 0 and reset.stdout.endswith("was successfully reset.\nAll done.\n")
    assert [f.kind for f in store.faults_for(engine, "gpu-01")] == ["firmware-drift"]

    update = run(["mlxfwmanager", "-u", "-y", "-i", "/opt/fw.bin"])
    assert "Updating FW" in update.stdout and store.faults_for(engine, "gpu-01") == []
    assert "All devices are up to date" in run(["mlxfwmanager", "-u", "-y", "-i", "/opt/fw.bin"]).stdout

    store.add_fault(engine, "gpu-01", "firmware-drift")
    SimBmc(engine, "gpu-01").update_firmware("https://fw.example.net/vbios.fwpkg", (), timeout_s=60)
    assert store.faults_for(engine, "gpu-01") == []


def test_a_gpu_off_the_bus_cannot_be_reset(sqlite_url) -> None:
    engine = get_engine(sqlite_url)
    run = _sim_node(engine, [1_750_000_000.0])
    store.add_fault(engine, "gpu-01", "xid79", gpu=1)
    reset = run(["nvidia-smi", "-r"])
    assert reset.exit_status == 15 and "Unable to determine the device handle" in reset.stderr
    assert [f.kind for f in store.faults_for(engine, "gpu-01")] == ["xid79"]
