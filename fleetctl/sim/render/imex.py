"""`nvidia-imex-ctl -N` (read by checks.imex): the IMEX domain as this tray's daemon sees it.

The layout is the real tool's (tests/fixtures/checks/imex: an 18-tray GB200 domain, IMEX
570.172): the connectivity legend, the time, each tray's address, state and version, the
node-to-node table and the domain's state. A tray whose daemon is down is UNAVAILABLE to the
others, its row I (not reachable, no status) and its column N (never connected), as the
fixture derived from that output shows it, and the domain, up on the other trays, is DEGRADED
(the state CycleCloud's health agent reports for an unhealthy domain, quoted in
linux-system-roles/hpc#85: "IMEX domain status is DEGRADED").
"""

from __future__ import annotations

import time

from fleetctl.sim.node import NodeState, ToolOutput

_LEGEND = """Connectivity Table Legend:
I - Invalid - Node wasn't reachable, no connection status available
N - Never Connected
R - Recovering - Connection was lost, but clean up has not yet been triggered.
D - Disconnected - Connection was lost, and clean up has been triggreed.
A - Authenticating - If GSSAPI enabled, client has initiated mutual authentication.
!V! - Version mismatch, communication disabled.
!M! - Node map mismatch, communication disabled.
C - Connected - Ready for operation
"""


def render_imex_ctl_domain(node: NodeState) -> ToolOutput:
    """`nvidia-imex-ctl -N` on `node`. Where its own daemon does not run, the tool reaches no
    command service and prints no domain (the message is the simulator's: no public transcript
    of it was found; what a judge sees is no Domain State line and a non-zero exit)."""
    if node.host.services.get("nvidia-imex") != "active":
        return ToolOutput("", "Failed to connect to the IMEX command service: Connection refused\n", 1)
    members = node.domain
    version = ".".join(node.profile.driver_version.split(".")[:2])  # IMEX ships with the driver: 570.172
    stamp = time.gmtime(node.now)
    lines = [
        _LEGEND,
        f"{stamp.tm_mon}/{stamp.tm_mday}/{stamp.tm_year} {time.strftime('%H:%M:%S', stamp)}.{int(node.now * 1000) % 1000:03d}",
        "Nodes:",
    ]
    for index, member in enumerate(members):
        state = "READY" if member.imex_ready else "UNAVAILABLE"
        lines.append(f"{f'Node #{index}':<9} - {member.address:<15} - {state:<20} - Version: {version}")
    lines.append("")
    lines.append(" Nodes From\\To  " + "".join(f"{i:<4}" for i in range(len(members))).rstrip())
    for source, row in enumerate(members):
        cells = ["C" if row.imex_ready and col.imex_ready else ("I" if not row.imex_ready else "N") for col in members]
        lines.append(f"{source:>8}        " + "".join(f"{c:<4}" for c in cells).rstrip())
    lines.append("")
    lines.append(f"Domain State: {'UP' if all(m.imex_ready for m in members) else 'DEGRADED'}")
    return ToolOutput("\n".join(lines) + "\n")
