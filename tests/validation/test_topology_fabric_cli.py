"""`fleetctl topology fabric` at the command line: its forms, and bad input in one line."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from fleetctl.cli.main import app

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
FABRIC = FIXTURES / "fabric" / "ibnetdiscover_topograph_example.out"
GB200_TRAY = FIXTURES / "checks" / "nvidia_smi" / "q_gb200_tray_fabric_ok.txt"
INVENTORY = """
nodes:
  - {name: node1, address: a08-p1-dgx-04-c01, profile: h100-sxm, scheduler: slurm, switch: leaf-4, island: ib}
  - {name: node2, address: a08-p1-dgx-04-c02, profile: h100-sxm, scheduler: kubernetes, switch: leaf-4, island: ib}
  - {name: gb-01, address: gb-01, profile: gb200-nvl72, scheduler: slurm, island: nvl, nvlink_domain: nvl72-a}
  - {name: gb-02, address: gb-02, profile: gb200-nvl72, scheduler: slurm, island: nvl, nvlink_domain: nvl72-a}
"""


@pytest.fixture
def inventory(tmp_path: Path) -> Path:
    path = tmp_path / "inventory.yaml"
    path.write_text(INVENTORY)
    smi = tmp_path / "smi"
    smi.mkdir()
    for tray in ("gb-01", "gb-02"):
        shutil.copy(GB200_TRAY, smi / f"{tray}.txt")
    return path


def fabric(inventory: Path, *args: str):
    return CliRunner().invoke(app, ["topology", "fabric", str(inventory), *args])


def test_the_report_agrees_and_counts(inventory: Path) -> None:
    out = fabric(inventory, "--ibnetdiscover", str(FABRIC), "--nvidia-smi", str(inventory.parent / "smi"))
    assert out.exit_code == 0, out.output
    assert out.stdout.splitlines()[:3] == [
        "2 inventory nodes in the fabric, 1 NVLink domain; 109 HCAs name no host",
        "not in the fabric: gb-[01-02]",
        "in the fabric, not in the inventory: 120 hosts",
    ]


def test_block_names_the_domain_after_the_inventory_and_labels_carry_it(inventory: Path) -> None:
    smi = str(inventory.parent / "smi")
    block = fabric(inventory, "--nvidia-smi", smi, "--format", "block")
    assert block.exit_code == 0, block.output
    assert "BlockName=nvl72-a Nodes=gb-[01-02]" in block.stdout.splitlines()
    labels = json.loads(
        fabric(inventory, "--ibnetdiscover", str(FABRIC), "--nvidia-smi", smi, "--format", "labels").stdout
    )
    assert labels["node1"] == {
        "topology.fleetctl.io/leaf": "A09-P1-IBLEAF-01-04",
        "topology.fleetctl.io/island": "A10-P1-IBSPINE-01",
    }
    assert labels["gb-01"] == {"topology.fleetctl.io/nvlink-domain": "dc6e40c4-d722-4357-9ba6-5291dd461278-2"}


def test_the_tree_holds_the_slurm_nodes_only(inventory: Path) -> None:
    tree = fabric(inventory, "--ibnetdiscover", str(FABRIC), "--format", "tree")
    assert tree.exit_code == 0, tree.output
    assert "SwitchName=A09-P1-IBLEAF-01-04 Nodes=node1" in tree.stdout.splitlines() and "node2" not in tree.stdout


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ((), "give --ibnetdiscover FILE, --nvidia-smi DIR or both"),
        (("--ibnetdiscover", "missing.out"), "missing.out"),
        (("--ibnetdiscover", str(FIXTURES / "fabric" / "ibnetdiscover_topograph_example_bad.out")), "no switch"),
        (("--nvidia-smi", str(FABRIC)), "not a directory of nvidia-smi -q outputs"),
        (("--ibnetdiscover", str(FABRIC), "--format", "block"), "no node in an NVLink domain"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(inventory: Path, args: tuple[str, ...], message: str) -> None:
    out = fabric(inventory, *args)
    assert out.exit_code == 2 and out.stdout == ""
    assert message in out.stderr and len(out.stderr.strip().splitlines()) == 1, out.stderr
