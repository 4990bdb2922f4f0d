"""Every IB port state other than Active with a LinkUp physical link is down, in each listing
fleetctl reads (ibstat, ibstatus, ibv_devinfo -v): a port Armed or Initializing still prints
"Physical state: LinkUp", and one physically Polling may still say Active for a moment."""

from __future__ import annotations

import pytest

from fleetctl.checks import Status, judge
from fleetctl.checks.ib import parse_ibv_devinfo
from tests.support.fixtures import fixture_text

IBSTAT, IBSTATUS, DEVINFO = (
    "ib/ibstat_h100_ndr_ok.txt",
    "ib/ibstatus_a100_hdr_ok.txt",
    "ib/ibv_devinfo_vv_hdr_active_ok.txt",
)

# (fixture, profile, the healthy line of the first port, what replaces it, the state it shows)
CASES = [
    (IBSTAT, "h100-sxm", "State: Active", "State: Armed", "Armed / LinkUp"),
    (IBSTAT, "h100-sxm", "State: Active", "State: Initializing", "Initializing / LinkUp"),
    (IBSTAT, "h100-sxm", "State: Active", "State: Down", "Down / LinkUp"),
    (IBSTAT, "h100-sxm", "Physical state: LinkUp", "Physical state: Polling", "Active / Polling"),
    (IBSTAT, "h100-sxm", "Physical state: LinkUp", "Physical state: LinkErrorRecovery", "Active / LinkErrorRecovery"),
    (IBSTATUS, "a100-sxm-80gb", "state:           4: ACTIVE", "state:           3: ARMED", "Armed / LinkUp"),
    (IBSTATUS, "a100-sxm-80gb", "state:           4: ACTIVE", "state:           2: INIT", "Init / LinkUp"),
    (IBSTATUS, "a100-sxm-80gb", "phys state:      5: LinkUp", "phys state:      2: Polling", "Active / Polling"),
    (DEVINFO, None, "PORT_ACTIVE (4)", "PORT_ARMED (3)", "Armed / LinkUp"),
    (DEVINFO, None, "PORT_ACTIVE (4)", "PORT_INIT (2)", "Initializing / LinkUp"),
    (DEVINFO, None, "LINK_UP (5)", "POLLING (2)", "Active / Polling"),
    (DEVINFO, None, "LINK_UP (5)", "PORT_CONFIGURATION_TRAINING (4)", "Active / PortConfigurationTraining"),
]


@pytest.mark.parametrize(("fixture", "profile", "healthy", "broken", "shown"), CASES)
def test_a_port_not_active_and_linkup_is_down(fixture, profile, healthy, broken, shown):
    text = fixture_text(fixture)
    assert judge("ib", text, profile).status is Status.PASS  # the listing before the change
    result = judge("ib", text.replace(healthy, broken, 1), profile)
    assert result.status is Status.FAIL
    down = [f for f in result.findings if f.what.startswith(shown)]
    assert len(down) == 1 and down[0].where.endswith("port 1") and down[0].severity == "fail"
    assert result.metrics["down_ports"] == [down[0].where]


def test_ibv_devinfo_rate_is_lanes_times_lane_speed():
    [up] = parse_ibv_devinfo(fixture_text(DEVINFO))
    assert (up.device, up.state, up.physical_state, up.rate_gbps, up.link_layer, up.firmware) == (
        "mlx5_0",
        "Active",
        "LinkUp",
        200.0,
        "InfiniBand",
        "20.37.1700",
    )
    _, disabled = parse_ibv_devinfo(fixture_text("ib/ibv_devinfo_vv_hdr_one_disabled_fail.txt"))
    assert (disabled.state, disabled.physical_state, disabled.rate_gbps) == ("Down", "Disabled", None)


def test_ibv_devinfo_is_judged_against_the_profile_like_ibstat():
    """An HDR (200 Gb/s) port on an NDR (400 Gb/s) profile is slow, in ibv_devinfo as in ibstat."""
    result = judge("ib", fixture_text(DEVINFO), "h100-sxm")
    assert result.status is Status.FAIL and any("rate 200 Gb/s, expected 400" in f.what for f in result.findings)


def test_plain_ibv_devinfo_is_no_evidence_of_a_trained_link():
    result = judge("ib", fixture_text("ib/ibv_devinfo_plain_mlx4_no_rate_error.txt"))
    assert result.status is Status.ERROR and "ibv_devinfo -v" in result.reason


@pytest.mark.parametrize(
    ("healthy", "broken"),
    [
        ("PORT_ACTIVE (4)", "PORT_SOMETHING (9)"),
        ("LINK_UP (5)", "LINKY (5)"),
        ("50.0 Gbps (64)", "fifty (64)"),
        ("\t\t\tlink_layer:\t\tInfiniBand\n", ""),
    ],
)
def test_an_ibv_devinfo_port_it_cannot_read_is_an_error(healthy, broken):
    text = fixture_text(DEVINFO).replace(healthy, broken, 1)
    assert judge("ib", text).status is Status.ERROR
