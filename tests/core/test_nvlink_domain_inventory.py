"""The inventory's `nvlink_domain`: optional, bounded, one profile per domain (stored and shown:
tests/core/test_cli_node.py)."""

from __future__ import annotations

import pytest

from fleetctl.inventory.parse import InventoryError, parse_inventory

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
        ("\"nvl\\x1b[31m\"", r"field 'nvlink_domain' has an invalid value"),  # control characters
        ("\"nvl72\\n\"", r"field 'nvlink_domain' has an invalid value"),  # \Z, not $: no trailing newline
        ("d" * 64, r"field 'nvlink_domain' has an invalid value"),  # bounded: 63 at most
        ("[a, b]", r"field 'nvlink_domain' must be a string"),
        ("true", r"field 'nvlink_domain' must be a string"),
    ],
)
def test_bad_domain_name_is_one_line(value: str, message: str) -> None:
    with pytest.raises(InventoryError, match=message) as err:
        parse_inventory(f"nodes: [{{name: a, address: x, profile: gb200, nvlink_domain: {value}}}]", "inv.yaml", PROFILES)
    assert "\n" not in str(err.value) and "\x1b" not in str(err.value)


def test_a_domain_of_two_profiles_is_refused() -> None:
    text = DOMAIN.replace("{name: gb-02, address: sim://gb-02, profile: gb200",
                          "{name: gb-02, address: sim://gb-02, profile: h100-sxm")
    with pytest.raises(InventoryError, match=r"^inv.yaml: node gb-02: NVLink domain nvl72-r01 has profile gb200 "
                                             r"at node gb-01, not h100-sxm"):
        parse_inventory(text, "inv.yaml", PROFILES)

