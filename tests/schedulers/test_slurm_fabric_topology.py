"""The topology.conf `fleetctl topology fabric --format tree` writes from a real ibnetdiscover
output (NVIDIA Topograph's test fabric, tests/fixtures/fabric/SOURCES.md), read by a real
slurmctld (Debian's slurm-wlm 22.05): the test cluster's four nodes stand for four DGX hosts of
that fabric (their inventory addresses), two on each of two scalable units under one spine.
Debian's Slurm has no topology/block plugin (it came in Slurm 23.11): the block form is held to
Slurm's topology.conf syntax in tests/validation/test_fabric.py only."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from bench.slurm_cluster import SlurmCluster
from fleetctl.cli.main import app
from fleetctl.schedulers.slurm import SlurmScheduler
from tests.schedulers.test_slurm_topology import _switches

pytestmark = pytest.mark.slurm

FABRIC = Path(__file__).resolve().parents[1] / "fixtures" / "fabric" / "ibnetdiscover_topograph_example.out"
# The inventory calls the switches otherwise, and puts node3 on the wrong one.
INVENTORY = """
nodes:
  - {name: node1, address: a08-p1-dgx-04-c01, profile: h100-sxm, scheduler: slurm, rack: r1, switch: leaf-4, island: ib}
  - {name: node2, address: a08-p1-dgx-04-c02, profile: h100-sxm, scheduler: slurm, rack: r1, switch: leaf-4, island: ib}
  - {name: node3, address: b05-p1-dgx-05-c01, profile: h100-sxm, scheduler: slurm, rack: r2, switch: leaf-4, island: ib}
  - {name: node4, address: b05-p1-dgx-05-c02, profile: h100-sxm, scheduler: slurm, rack: r2, switch: leaf-5, island: ib}
"""


def test_slurmctld_reads_the_tree_fleetctl_writes_from_ibnetdiscover(
    slurm: SlurmScheduler, slurm_cluster: SlurmCluster, tmp_path
) -> None:
    inventory = tmp_path / "inventory.yaml"
    inventory.write_text(INVENTORY)
    runner = CliRunner()
    report = runner.invoke(app, ["topology", "fabric", str(inventory), "--ibnetdiscover", str(FABRIC)])
    assert report.exit_code == 1 and "inventory switch leaf-4 holds node[1-3]; the fabric splits them" in report.stdout
    written = runner.invoke(
        app, ["topology", "fabric", str(inventory), "--ibnetdiscover", str(FABRIC), "--format", "tree"]
    )
    assert written.exit_code == 0, written.output

    with slurm_cluster.topology(written.stdout):
        shown = _switches(slurm_cluster.run("scontrol", "show", "topology"))
        assert shown == {
            "A09-P1-IBLEAF-01-04": ("0", "node[1-2]", ""),
            "B09-P1-IBLEAF-01-05": ("0", "node[3-4]", ""),
            "A10-P1-IBSPINE-01": ("1", "node[1-4]", "A09-P1-IBLEAF-01-04,B09-P1-IBLEAF-01-05"),
        }
        # Slurm places by the fabric: with node1 busy, two nodes under one switch are node3
        # and node4 (in name order alone they would be node2 and node3).
        first = slurm_cluster.submit_sleep_job("-N1", "-w", "node1")
        slurm_cluster.wait_for_run(first, 0)
        second = slurm_cluster.submit_sleep_job("-N2", "--switches=1")
        assert slurm_cluster.wait_for_run(second, 0).nodes == ("node3", "node4")
