"""The inventory's fabric as a Slurm topology.conf: a table of inventories and the file each
must give, and the inventories that have no tree (one line each)."""

from __future__ import annotations

import pytest

from fleetctl.inventory.parse import NodeSpec
from fleetctl.inventory.topology import HEADER, TopologyError, slurm_topology_conf


def _nodes(*rows: tuple[str, str, str]) -> list[NodeSpec]:
    return [
        NodeSpec(name=name, address=name, profile="h100-sxm", switch=switch, island=island)
        for name, switch, island in rows
    ]


@pytest.mark.parametrize(
    "rows,lines",
    [
        # One island over two leaves: the island is the top, no root is needed.
        (
            [("gpu-001", "leaf-1", "ib-a"), ("gpu-002", "leaf-1", "ib-a"), ("gpu-003", "leaf-2", "ib-a")],
            [
                "SwitchName=leaf-1 Nodes=gpu-[001-002]",
                "SwitchName=leaf-2 Nodes=gpu-003",
                "SwitchName=ib-a Switches=leaf-[1-2]",
            ],
        ),
        # Two islands: a root joins them, or Slurm could not run a job across them.
        (
            [("gpu-001", "leaf-1", "ib-a"), ("gpu-002", "leaf-2", "ib-b")],
            [
                "SwitchName=leaf-1 Nodes=gpu-001",
                "SwitchName=leaf-2 Nodes=gpu-002",
                "SwitchName=ib-a Switches=leaf-1",
                "SwitchName=ib-b Switches=leaf-2",
                "SwitchName=spine Switches=ib-a,ib-b",
            ],
        ),
        # NVLink domains with no leaf of their own: the nodes hang under the island.
        (
            [("gb-01", "", "nvl-1"), ("gb-02", "", "nvl-1"), ("gb-03", "", "nvl-2")],
            [
                "SwitchName=nvl-1 Nodes=gb-[01-02]",
                "SwitchName=nvl-2 Nodes=gb-03",
                "SwitchName=spine Switches=nvl-[1-2]",
            ],
        ),
        # Islands in the inventory's order, whether over leaves or over nodes.
        (
            [("g1", "", "nvl-b"), ("n1", "leaf-1", "ib-a")],
            [
                "SwitchName=leaf-1 Nodes=n1",
                "SwitchName=nvl-b Nodes=g1",
                "SwitchName=ib-a Switches=leaf-1",
                "SwitchName=spine Switches=nvl-b,ib-a",
            ],
        ),
        # Leaves without islands are tops themselves.
        (
            [("n1", "leaf-1", ""), ("n2", "leaf-2", "")],
            ["SwitchName=leaf-1 Nodes=n1", "SwitchName=leaf-2 Nodes=n2", "SwitchName=spine Switches=leaf-[1-2]"],
        ),
        # One leaf alone: no root.
        ([("n1", "leaf-1", ""), ("n2", "leaf-1", "")], ["SwitchName=leaf-1 Nodes=n[1-2]"]),
    ],
)
def test_slurm_topology_conf(rows, lines) -> None:
    assert slurm_topology_conf(_nodes(*rows)) == "\n".join([HEADER, *lines, ""])


def test_the_root_can_be_named() -> None:
    text = slurm_topology_conf(_nodes(("n1", "leaf-1", ""), ("n2", "leaf-2", "")), root="core")
    assert text.splitlines()[-1] == "SwitchName=core Switches=leaf-[1-2]"


@pytest.mark.parametrize(
    "rows,root,message",
    [
        ([("n1", "", ""), ("n2", "leaf-1", "")], "spine", r"^n1: no switch and no island in the inventory"),
        ([(f"n{i}", "", "") for i in range(5)], "spine", r"^n0, n1, n2 and 2 more: no switch and no island"),
        (
            [("n1", "leaf-1", "ib-a"), ("n2", "leaf-1", "ib-b")],
            "spine",
            r"^node n2: switch leaf-1 is in island ib-a at node n1, not ib-b$",
        ),
        (
            [("n1", "leaf-1", "ib-a"), ("n2", "", "ib-a")],
            "spine",
            r"^island ib-a: some nodes name a switch and n2 does not",
        ),
        ([("n1", "ib-a", "ib-a")], "spine", r"^ib-a names both a switch and an island$"),
        ([("n1", "spine", ""), ("n2", "leaf-2", "")], "spine", r"^the root switch spine is also a switch or island"),
        ([("n1", "leaf-1", "")], "bad root", r"^root switch name 'bad root' is not a valid switch name$"),
        ([], "spine", r"^no Slurm nodes in the inventory"),
    ],
)
def test_inventories_without_a_tree_are_refused_in_one_line(rows, root, message) -> None:
    with pytest.raises(TopologyError, match=message) as err:
        slurm_topology_conf(_nodes(*rows), root=root)
    assert "\n" not in str(err.value)


def test_cli_writes_the_file_whole_and_refuses_a_bad_inventory_in_one_line(tmp_path) -> None:
    from typer.testing import CliRunner

    from fleetctl.cli.main import app

    inventory = tmp_path / "inventory.yaml"
    inventory.write_text(
        "nodes:\n  - {name: n1, address: n1, profile: h100-sxm, scheduler: slurm, switch: leaf-1}\n"
        "  - {name: k1, address: k1, profile: h100-sxm, scheduler: kubernetes}\n"
    )
    out = tmp_path / "topology.conf"
    r = CliRunner().invoke(app, ["topology", "slurm-conf", str(inventory), "--out", str(out)])
    assert r.exit_code == 0 and r.stdout == f"{out}: 1 switches\n"
    assert out.read_text() == f"{HEADER}\nSwitchName=leaf-1 Nodes=n1\n"  # k1 is no Slurm node
    assert sorted(p.name for p in tmp_path.iterdir()) == ["inventory.yaml", "topology.conf"]  # no .partial left

    inventory.write_text("nodes:\n  - {name: n2, address: n2, profile: h100-sxm, scheduler: slurm}\n")
    r = CliRunner().invoke(app, ["topology", "slurm-conf", str(inventory), "--out", str(out)])
    assert r.exit_code == 2
    assert (
        r.output == f"error: {inventory}: n2: no switch and no island in the inventory, so no place in the topology\n"
    )
    assert out.read_text() == f"{HEADER}\nSwitchName=leaf-1 Nodes=n1\n"  # unchanged
