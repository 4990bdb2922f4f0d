"""The topology.conf `fleetctl topology slurm-conf` writes, read by a real slurmctld (Debian's
slurm-wlm): it starts with it, `scontrol show topology` gives back the inventory's tree, and
a job that asks for one leaf switch (`--switches=1`) runs under one."""

from __future__ import annotations

import re

import pytest
from typer.testing import CliRunner

from bench.slurm_cluster import SlurmCluster
from fleetctl.cli.main import app
from fleetctl.schedulers.slurm import SlurmScheduler

pytestmark = pytest.mark.slurm

# node1, node2 on leaf-1 and node3 on leaf-2, both in island ib-a; node4 alone in an NVLink
# domain with no leaf switch of its own. A Kubernetes-only node stays out of the file.
INVENTORY = """
nodes:
  - {name: node1, address: node1, profile: h100-sxm, scheduler: slurm, rack: r1, switch: leaf-1, island: ib-a}
  - {name: node2, address: node2, profile: h100-sxm, scheduler: slurm, rack: r1, switch: leaf-1, island: ib-a}
  - {name: node3, address: node3, profile: h100-sxm, scheduler: slurm, rack: r2, switch: leaf-2, island: ib-a}
  - {name: node4, address: node4, profile: h100-sxm, scheduler: [slurm, kubernetes], rack: r3, island: nvl-b}
  - {name: kube1, address: kube1, profile: h100-sxm, scheduler: kubernetes, rack: r3, switch: leaf-9, island: ib-a}
"""


def _switches(shown: str) -> dict[str, tuple[str, str, str]]:
    """scontrol show topology: {switch: (level, nodes, switches)}."""
    switches = {}
    for line in shown.splitlines():
        fields = dict(re.findall(r"(\w+)=(\S*)", line))
        if "SwitchName" in fields:
            switches[fields["SwitchName"]] = (
                fields.get("Level", ""),
                fields.get("Nodes", ""),
                fields.get("Switches", ""),
            )
    return switches


def test_slurmctld_reads_back_the_topology_fleetctl_writes(
    slurm: SlurmScheduler, slurm_cluster: SlurmCluster, tmp_path
) -> None:
    inventory = tmp_path / "inventory.yaml"
    inventory.write_text(INVENTORY)
    written = CliRunner().invoke(app, ["topology", "slurm-conf", str(inventory)])
    assert written.exit_code == 0, written.output
    assert "kube1" not in written.stdout and "leaf-9" not in written.stdout

    with slurm_cluster.topology(written.stdout):
        shown = _switches(slurm_cluster.run("scontrol", "show", "topology"))
        assert shown == {
            "leaf-1": ("0", "node[1-2]", ""),
            "leaf-2": ("0", "node3", ""),
            "nvl-b": ("0", "node4", ""),
            "ib-a": ("1", "node[1-3]", "leaf-[1-2]"),
            "spine": ("2", "node[1-4]", "ib-a,nvl-b"),
        }
        # Slurm places by the tree: two nodes under one leaf switch can only be leaf-1's.
        job_id = slurm_cluster.submit_sleep_job("-N2", "--switches=1")
        assert slurm_cluster.wait_for_run(job_id, 0).nodes == ("node1", "node2")
