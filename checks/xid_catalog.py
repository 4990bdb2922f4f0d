"""NVIDIA's Xid catalog (checks/catalog/xid.tsv) as fleetctl reads it: each code's action and
severity. Apart from the log parsers (checks.xid), so that what only needs a code's severity
(`fleetctl node event --xid`, the one constructor of a health event) reads the table without
compiling a parser."""

from __future__ import annotations

import csv
import re
from dataclasses import dataclass
from functools import cache
from importlib import resources


@dataclass(frozen=True)
class XidAction:
    code: int
    mnemonic: str
    description: str
    action: str  # one of ACTIONS
    severity: str  # one of SEVERITIES
    nvidia_action: str  # NVIDIA's immediate resolution bucket, verbatim ("" when it gives none)
    nvidia_followup: str  # NVIDIA's investigatory resolution bucket, verbatim


# NVIDIA's immediate resolution bucket -> fleetctl's action. WORKFLOW_XID_48 and the NVLink
# workflows begin with a GPU reset in NVIDIA's workflow descriptions; WORKFLOW_XID_45 and
# XID_154 depend on the rest of the log and are decided in _classify. A bucket missing
# here is a new one: the code reads "unknown" until someone maps it.
BUCKET_ACTIONS = {
    "IGNORE": "ignore",
    "RESTART_APP": "restart_app",
    "CHECK_UVM": "investigate_software",
    "UPDATE_SWFW": "update_software",
    "RESET_GPU": "reset_gpu",
    "WORKFLOW_XID_48": "reset_gpu",
    "WORKFLOW_NVLINK_ERR": "reset_gpu",
    "WORKFLOW_NVLINK5_ERR": "reset_gpu",
    "RESTART_VM": "reboot",
    "RESTART_BM": "reboot",
    "CHECK_MECHANICALS": "check_hardware",
    "CONTACT_SUPPORT": "contact_support",
}
# Actions a node must stop for; an action an application takes (or none) only needs a
# look when NVIDIA's follow-up is to contact support (it may be the hardware).
NODE_ACTIONS = {"reset_gpu", "reboot", "check_hardware", "contact_support"}
UNKNOWN = "unknown"
# Severity is fleetctl's own (the action stays NVIDIA's): a code NVIDIA leaves to the
# application still warns when its repeats say something about the node, so that a burst
# escalates (the repeat rule of fleetctl.nodes.health).
_WATCHED = {94: "contained memory error: repeats mean failing memory"}


def _derived(code: int, mnemonic: str, description: str, nvidia_action: str, followup: str) -> XidAction:
    action = BUCKET_ACTIONS.get(nvidia_action, UNKNOWN)
    if action in NODE_ACTIONS:
        severity = "critical"
    elif action == UNKNOWN or "CONTACT_SUPPORT" in followup or code in _WATCHED:
        severity = "warning"
    else:
        severity = "info"
    return XidAction(code, mnemonic, description, action, severity, nvidia_action, followup)


@cache
def xid_catalog_version() -> str:
    """The date NVIDIA's catalog was read on, from the header of checks/catalog/xid.tsv."""
    text = (resources.files("fleetctl.checks") / "catalog" / "xid.tsv").read_text()
    m = re.search(r"Generated at (\d{4}-\d\d-\d\d)", text)
    return m[1] if m else "unknown"


@cache
def xid_catalog() -> dict[int, XidAction]:
    text = (resources.files("fleetctl.checks") / "catalog" / "xid.tsv").read_text()
    rows = csv.DictReader((line for line in text.splitlines() if not line.startswith("#")), delimiter="\t")
    return {
        int(row["code"]): _derived(
            int(row["code"]), row["mnemonic"], row["description"], row["nvidia_action"], row["nvidia_followup"]
        )
        for row in rows
    }


def xid_action(code: int) -> XidAction:
    """The catalog entry, judged without the rest of the log. A code not in NVIDIA's
    catalog is "unknown" with a warning: a person looks, nobody acts on a guess."""
    return xid_catalog().get(
        code, XidAction(code, "UNKNOWN", "not in NVIDIA's Xid catalog", UNKNOWN, "warning", "", "")
    )
