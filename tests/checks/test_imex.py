"""nvidia-imex-ctl -N, the IMEX domain of a GB200 NVL72 rack:
the domain UP, every node READY, every pair Connected; anything else fails, and output that is
not the tool's, or cut, is an error."""

from __future__ import annotations

import pytest

from fleetctl.checks import Status, judge
from tests.support.fixtures import fixture_text

OK = "imex/imex_ctl_18_nodes_up_ok.txt"


def test_an_18_tray_domain_up_passes_and_a_tray_down_fails():
    ok = judge("imex", fixture_text(OK), "gb200")
    assert ok.status is Status.PASS and ok.metrics["nodes"] == ok.metrics["ready"] == 18
    down = judge("imex", fixture_text("imex/imex_ctl_node7_unavailable_down_fail.txt"), "gb200")
    assert down.status is Status.FAIL
    assert {f.where for f in down.findings} == {None, "node #7 (172.31.51.157)"}


@pytest.mark.parametrize(
    ("cell", "meaning"),
    [("N", "never connected"), ("D", "disconnected"), ("!V!", "version mismatch"), ("R", "recovering")],
)
def test_any_pair_not_connected_fails_with_the_legends_meaning(cell, meaning):
    text = fixture_text(OK)
    row = "       3        " + "   ".join(["C"] * 18)
    assert row in text
    broken = text.replace(row, "       3        " + "   ".join(["C"] * 5 + [cell] + ["C"] * 12))
    result = judge("imex", broken, "gb200")
    assert result.status is Status.FAIL and any(f.where == "node #3" and meaning in f.what for f in result.findings)


# Held out: a real one-node domain from a DRA driver bug report (a ComputeDomain daemon's log),
# with the daemon's own lines after the table; no Version column.
HELD_OUT = """IMEX daemon status:
READY
Connectivity Table Legend:
C - Connected - Ready for operation

3/25/2025 10:39:43.659
Nodes:
Node #0   - 10.136.206.48   - READY

 Nodes From\\To  0
       0        C
Domain State: UP
READY stopAtReady: 0
keepGoing: 1
"""


def test_a_held_out_real_domain_is_read():
    assert judge("imex", HELD_OUT).status is Status.PASS


@pytest.mark.parametrize(
    "damage",
    [
        lambda t: t.replace("Domain State: UP", "Domain: UP"),
        lambda t: t.split("\n Nodes From")[0] + "\nDomain State: UP\n",
        lambda t: t.replace("      17        C", "      17        C   C"),  # a row of 19 cells
    ],
)
def test_output_it_cannot_read_is_an_error(damage):
    damaged = damage(fixture_text(OK))
    assert damaged != fixture_text(OK)
    assert judge("imex", damaged).status is Status.ERROR
