"""ibstat judged by link layer and by the profile's rails: InfiniBand rails and RoCE rails
each against their own count and rate; other ports are listed, not judged."""

from __future__ import annotations

from dataclasses import replace

import pytest

from fleetctl.checks import Status
from fleetctl.checks.ib import judge_ib
from fleetctl.checks.profiles import load_profile
from tests.support.fixtures import fixture_text

H100 = load_profile("h100-sxm")
# The gpud host: 8 InfiniBand rails at 400 Active; Ethernet: one Active at 100, three Down.
EIGHT_RAILS = "ib/ibstat_h100_8rails_3eth_down_ok.txt"
# 8 InfiniBand rails at 400 and a BlueField-3 Ethernet bond Active at 200.
WITH_BOND = "ib/ibstat_h100_8rails_bluefield_bond_ok.txt"


@pytest.mark.parametrize(
    ("fixture", "profile", "status", "reason_has"),
    [
        (EIGHT_RAILS, H100, Status.PASS, "8 of 8 rails"),
        # a RoCE host: its Ethernet rails are judged against their own count and rate
        (
            EIGHT_RAILS,
            replace(H100, ib_port_count=0, roce_port_count=1, roce_rate_gbps=100),
            Status.PASS,
            "1 of 4 rails",
        ),
        (
            EIGHT_RAILS,
            replace(H100, ib_port_count=0, roce_port_count=2, roce_rate_gbps=100),
            Status.FAIL,
            "Down / Disabled (Ethernet)",
        ),
        (
            EIGHT_RAILS,
            replace(H100, ib_port_count=0, roce_port_count=1, roce_rate_gbps=200),
            Status.FAIL,
            "rate 100 Gb/s, expected 200",
        ),
        # both fabrics expected
        (WITH_BOND, replace(H100, roce_port_count=1, roce_rate_gbps=200), Status.PASS, "9 of 9 rails"),
        (WITH_BOND, replace(H100, roce_port_count=1, roce_rate_gbps=400), Status.FAIL, "rate 200 Gb/s, expected 400"),
        (WITH_BOND, H100, Status.PASS, "1 other ports not judged"),
        # more InfiniBand rails expected than the host has
        (EIGHT_RAILS, replace(H100, ib_port_count=9), Status.FAIL, "InfiniBand rails"),
        # a profile that expects rails of a layer the host has none of: no evidence
        (EIGHT_RAILS, replace(H100, ib_port_count=0, roce_port_count=0), Status.ERROR, "rails not judged"),
    ],
)
def test_rails_by_link_layer(fixture, profile, status, reason_has):
    result = judge_ib(fixture_text(fixture), profile)
    assert result.status is status, result.reason
    assert reason_has in result.reason


def test_unused_ethernet_ports_are_listed_not_judged():
    result = judge_ib(fixture_text(EIGHT_RAILS), H100)
    notes = [f for f in result.findings if "not a compute rail" in f.what]
    assert {f.where for f in notes} == {"mlx5_2 port 1", "mlx5_7 port 1", "mlx5_8 port 1"}
    assert all(f.severity == "info" for f in notes)


def test_a_rail_down_fails_and_names_the_port():
    text = fixture_text(EIGHT_RAILS)
    at = text.index("CA 'mlx5_3'")
    broken = text[:at] + text[at:].replace("State: Active", "State: Down", 1).replace(
        "Physical state: LinkUp", "Physical state: Polling", 1
    )
    result = judge_ib(broken, H100)
    assert result.status is Status.FAIL
    assert any(f.where == "mlx5_3 port 1" and f.severity == "fail" for f in result.findings)
