"""The one adapter between the agent and the checks/ catalog: a kernel message in, the
faults it reports out. Only this function knows which parser of checks/ reads the lines.

A fault without an Xid number (an NVSwitch SXid, an mlx5 link going down) goes with code
None: the workflow reads `code` as an Xid, and an SXid is not one."""

from __future__ import annotations

from dataclasses import dataclass

from fleetctl.checks._text import UnjudgeableOutput
from fleetctl.checks.signatures import signatures
from fleetctl.checks.xid import parse_kernel_log
from fleetctl.checks.xid_policy import XidPolicy
from fleetctl.nodes.gpu_quarantine import named_gpu
from fleetctl.nodes.health import catalog_severity
from fleetctl.text import bounded

# The database stores the code as a 32-bit integer; a larger number is not an Xid.
MAX_CODE = 2**31 - 1


class UnreadableRecord(ValueError):
    """The checks/ parser refused the message (an Xid report it cannot read, a number out of
    any real report's range): no fault can be read from it. The agent counts and skips it."""


@dataclass(frozen=True)
class Fault:
    code: int | None  # the Xid (or the Xid the catalog gives a fault without one)
    message: str
    # The catalog's as the site's policy has it: info | warning | critical. Critical drains the node at once: sent (and
    # queued in the node's workflow) before anything else, and a fault without an Xid drains
    # by it.
    severity: str = "warning"
    # The catalog signature of a fault without an Xid (checks/catalog/signatures.tsv), "" for
    # an Xid: what the node's workflow reads a fault of an NVLink domain's fabric by.
    signature: str = ""
    # The PCI address of the GPU an Xid names (its Xid line's), "" for a fault without one: a
    # code the site's policy scopes to one GPU takes that GPU out (fleetctl.nodes.gpu_quarantine).
    gpu: str = ""

    @property
    def critical(self) -> bool:
        return self.severity == "critical"


def detect(message: str, policy: XidPolicy) -> list[Fault]:
    """The faults in one kernel message: Xid reports (and failures the catalog reads as an
    Xid, such as a GPU fallen off the bus without its Xid line), then the other signatures,
    each as severe as the site's `policy` says.
    A report the parser refuses (an Xid code out of range, a damaged Xid line) raises
    UnreadableRecord, with the parser's one-line reason. Each fault's message is bounded and
    encodable (fleetctl.text.bounded)."""
    if message.lstrip().startswith("{"):  # checks/ would read it as a journal JSON document
        message = f"kernel: {message}"
    try:
        log = parse_kernel_log(message)
    except UnjudgeableOutput as exc:
        raise UnreadableRecord(bounded(str(exc), 300)) from None
    faults = [
        Fault(
            e.code,
            bounded(f"Xid {e.code} on {e.pci}: {e.message}".strip()),
            catalog_severity(e.code, policy=policy),
            gpu=named_gpu(e.pci),
        )
        for e in log.xids
        if e.code <= MAX_CODE
    ]
    catalog = signatures()
    faults += [
        Fault(
            None,
            bounded(f"{catalog[s.name].description} on {s.where or 'the node'}: {s.message}".strip()),
            catalog_severity(None, s.name, policy=policy),
            s.name,
        )
        for s in log.signatures
    ]
    return faults
