"""The one adapter between the agent and the checks/ catalog: a kernel message in, the
faults it reports out. Only this function knows which parser of checks/ reads the lines.

A fault without an Xid number (an NVSwitch SXid, an mlx5 link going down) goes with code
None: the workflow reads `code` as an Xid, and an SXid is not one."""

from __future__ import annotations

from dataclasses import dataclass

from checks.xid import parse_xid_lines, xid_action

# The database stores the code as a 32-bit integer; a larger number is not an Xid.
MAX_CODE = 2**31 - 1


@dataclass(frozen=True)
class Fault:
    code: int | None  # the Xid (or the Xid the catalog gives a fault without one)
    message: str
    critical: bool = False  # the catalog drains the node at once for it: sent before anything else


def detect(message: str) -> list[Fault]:
    return [Fault(e.code, f"Xid {e.code} on {e.pci}: {e.message}".strip(), xid_action(e.code).severity == "critical")
            for e in parse_xid_lines(message) if e.code <= MAX_CODE]
