"""The one adapter between the agent and the checks/ catalog: a kernel message in, the
faults it reports out. Only this function knows which parser of checks/ reads the lines.

A fault without an Xid number (an NVSwitch SXid, an mlx5 link going down) goes with code
None: the workflow reads `code` as an Xid, and an SXid is not one."""

from __future__ import annotations

from dataclasses import dataclass

from checks.signatures import signatures
from checks.xid import BadKernelLog, parse_kernel_log, xid_action

# The database stores the code as a 32-bit integer; a larger number is not an Xid.
MAX_CODE = 2**31 - 1


@dataclass(frozen=True)
class Fault:
    code: int | None  # the Xid (or the Xid the catalog gives a fault without one)
    message: str
    # The catalog's: info | warning | critical. Critical drains the node at once: sent (and
    # queued in the node's workflow) before anything else, and a fault without an Xid drains
    # by it.
    severity: str = "warning"

    @property
    def critical(self) -> bool:
        return self.severity == "critical"


def detect(message: str) -> list[Fault]:
    """The faults in one kernel message: Xid reports (and failures the catalog reads as an
    Xid, such as a GPU fallen off the bus without its Xid line), then the other signatures.
    A report the parser refuses (an Xid code out of range, a damaged line) is no fault."""
    try:
        log = parse_kernel_log(message)
    except BadKernelLog:
        return []
    faults = [Fault(e.code, f"Xid {e.code} on {e.pci}: {e.message}".strip(), xid_action(e.code).severity)
              for e in log.xids if e.code <= MAX_CODE]
    catalog = signatures()
    faults += [Fault(None, f"{catalog[s.name].description} on {s.where or 'the node'}: {s.message}".strip(),
                     catalog[s.name].severity)
               for s in log.signatures]
    return faults
