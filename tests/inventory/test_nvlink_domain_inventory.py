"""The inventory's `nvlink_domain`: optional, bounded, one profile per domain (stored and shown:
tests/cli/test_cli_node.py)."""

from __future__ import annotations

import pytest

from fleetctl.inventory.parse import InventoryError, parse_inventory
from fleetctl.inventory.topology import domain_size_conflict

PROFILES = {"gb200", "h100-sxm"}
DOMAIN = """
nodes:
  - {name: gb-01, address: sim://gb-01, profile: gb200, rack: nvl-r01, nvlink_domain: nvl72-r01}
  - {name: gb-02, address: sim://gb-02, profile: gb200, rack: nvl-r01, nvlink_domain: nvl72-r01}
  - {name: hgx-01, address: sim://hgx-01, profile: h100-sxm}
"""


def test_a_domain_is_read_and_a_node_without_one_is_in_none() -> None:
    first, second, hgx = parse_inventory(DOMAIN, "inv.yaml", PROFILES)
    assert (first.nvlink_domain, second.nvlink_domain, hgx.nvlink_domain) == ("nvl72-r01", "nvl72-r01", "")


@pytest.mark.parametrize(
    "value,message",
    [
        ("'nvl 72'", r"nodes\[0\] \(a\): field 'nvlink_domain' has an invalid value"),
        ('"nvl\\x1b[31m"', r"field 'nvlink_domain' has an invalid value"),  # control characters
        ('"nvl72\\n"', r"field 'nvlink_domain' has an invalid value"),  # \Z, not $: no trailing newline
        ("d" * 64, r"field 'nvlink_domain' has an invalid value"),  # bounded: 63 at most
        ("[a, b]", r"field 'nvlink_domain' must be a string"),
        ("true", r"field 'nvlink_domain' must be a string"),
    ],
)
def test_bad_domain_name_is_one_line(value: str, message: str) -> None:
    with pytest.raises(InventoryError, match=message) as err:
        parse_inventory(
            f"nodes: [{{name: a, address: a, profile: gb200, nvlink_domain: {value}}}]", "inv.yaml", PROFILES
        )
    assert "\n" not in str(err.value) and "\x1b" not in str(err.value)


def test_a_domain_of_two_profiles_is_refused() -> None:
    text = DOMAIN.replace(
        "{name: gb-02, address: sim://gb-02, profile: gb200", "{name: gb-02, address: sim://gb-02, profile: h100-sxm"
    )
    with pytest.raises(
        InventoryError,
        match=r"^inv.yaml: node gb-02: NVLink domain nvl72-r01 has profile gb200 "
        r"at node gb-01, not h100-sxm",
    ):
        parse_inventory(text, "inv.yaml", PROFILES)


# (GPUs per node, GPUs per NVLink domain) as checks/profiles gives them.
SIZES = {"gb200": (4, 72), "h100-sxm": (8, 0)}


def _domain(count: int, profile: str = "gb200") -> list:
    entries = "".join(
        f"  - {{name: t{i:02d}, address: sim://t{i:02d}, profile: {profile}, nvlink_domain: nvl72-r01}}\n"
        for i in range(count)
    )
    return parse_inventory("nodes:\n" + entries, "inv.yaml", PROFILES)


def test_a_full_nvl72_domain_fits_and_a_nineteenth_tray_does_not() -> None:
    assert domain_size_conflict(_domain(18), SIZES) is None
    assert (
        domain_size_conflict(_domain(19), SIZES)
        == "NVLink domain nvl72-r01: 19 nodes of 4 GPUs (gb200) are 76 GPUs, more than its domain of 72"
    )


def test_an_hgx_node_names_no_domain() -> None:
    assert (
        domain_size_conflict(_domain(1, "h100-sxm"), SIZES)
        == "node t00: profile h100-sxm has no multi-node NVLink domain, so it names no nvlink_domain (not nvl72-r01)"
    )


def test_the_shipped_gb200_profile_holds_18_trays() -> None:
    from fleetctl.checks.profiles import load_profile

    gb200 = load_profile("gb200")
    assert (gb200.gpu_count, gb200.nvlink_domain_gpus) == (4, 72)  # NVIDIA: 18 compute trays x 4 GPUs = 72
