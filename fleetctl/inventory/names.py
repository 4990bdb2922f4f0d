r"""The alphabet of node names and labels, for the inventory and every executor. Pure.

Names and labels reach shells, scheduler commands and workflow ids: keep them to a
conservative alphabet (what Slurm, Kubernetes and DNS all accept). They end in \Z, not $:
`$` also matches before a trailing newline, which would let "node\n" through `.match`.
"""

from __future__ import annotations

import re

NODE_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,62}\Z")
LABEL_KEY_RE = re.compile(r"^([A-Za-z0-9][A-Za-z0-9.-]{0,252}/)?[A-Za-z0-9]([A-Za-z0-9._-]{0,61}[A-Za-z0-9])?\Z")
LABEL_VALUE_RE = re.compile(r"^([A-Za-z0-9]([A-Za-z0-9._-]{0,61}[A-Za-z0-9])?)?\Z")
# What Kubernetes accepts as a node name: an RFC 1123 subdomain (lower case), at most 253.
KUBERNETES_NODE_NAME_RE = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")


# A node several schedulers run (SUNK: a Kubernetes node whose slurmd pod makes it a Slurm
# node too) is stored with their kinds joined by this, in the order a drain takes them.
SCHEDULER_JOIN = "+"


def scheduler_members(scheduler: str) -> tuple[str, ...]:
    """'slurm+kubernetes' -> ('slurm', 'kubernetes'); a single kind -> (kind,)."""
    return tuple(scheduler.split(SCHEDULER_JOIN))


def valid_kubernetes_node_name(name: str) -> bool:
    """Whether Kubernetes accepts `name` as a node name."""
    return len(name) <= 253 and KUBERNETES_NODE_NAME_RE.fullmatch(name) is not None
