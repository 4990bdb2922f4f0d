"""Failure signatures without an Xid number (checks/catalog/signatures.tsv), and the action
vocabulary every GPU-fault verdict uses."""

from __future__ import annotations

import csv
from dataclasses import dataclass
from functools import cache
from importlib import resources

from fleetctl.checks.result import Finding

# What to do about a fault, mildest first (the worst one of a log is the node's action).
# "unknown": NVIDIA gives no remedy (or the code is not in its catalog); a person decides.
ACTIONS = (
    "ignore",
    "restart_app",
    "update_software",
    "investigate_software",
    "unknown",
    "restart_fabric_manager",
    "reset_gpu",
    "reboot",
    "check_hardware",
    "contact_support",
)
FINDING_SEVERITY = {"critical": "fail", "warning": "warn", "info": "info"}
# The longest signature name an event may carry (the catalog's are under 40 characters).
MAX_SIGNATURE_NAME = 64


@dataclass(frozen=True)
class Signature:
    name: str
    tool: str  # "kernel", "nvidia-smi", or "sysfs"/"procfs" (the agent's node watch)
    as_xid: int | None
    action: str  # one of ACTIONS
    severity: str  # one of SEVERITIES
    description: str
    source: str

    def finding(self, detail: str, where: str | None) -> Finding:
        what = f"{self.description}: {self.action.replace('_', ' ')}"
        return Finding(f"{what}; {detail}" if detail else what, where, FINDING_SEVERITY[self.severity])


@cache
def signatures() -> dict[str, Signature]:
    text = (resources.files("fleetctl.checks") / "catalog" / "signatures.tsv").read_text()
    rows = csv.DictReader((line for line in text.splitlines() if not line.startswith("#")), delimiter="\t")
    return {
        row["name"]: Signature(
            row["name"],
            row["tool"],
            int(row["as_xid"]) if row["as_xid"] else None,
            row["action"],
            row["severity"],
            row["description"],
            row["source"],
        )
        for row in rows
    }
