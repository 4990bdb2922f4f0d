"""`nvidia-imex-ctl -N`: the IMEX domain of a multi-node NVLink domain (GB200 NVL72), as one
node's IMEX daemon sees it: each node's state, the node-to-node connectivity table, and the
domain's state. A pass needs the domain UP, every node READY and every pair Connected.

    Node #0   - 172.31.48.81    - READY                - Version: 570.172
     Nodes From\\To  0   1
           0        C   C
    Domain State: UP
"""

from __future__ import annotations

import re

from fleetctl.checks._text import UnjudgeableOutput, integer, verdict
from fleetctl.checks.profiles import GpuProfile
from fleetctl.checks.result import CheckResult, Finding

_NODE = re.compile(
    r"^Node #(?P<index>\d+)\s+-\s+(?P<address>\S+)\s+-\s+(?P<state>[A-Z_]+)(?:\s+-\s+Version: (?P<version>\S+))?\s*$"
)
_ROW = re.compile(r"^\s+(?P<index>\d+)\s{2,}(?P<cells>(?:(?:C|I|N|R|D|A|!V!|!M!)\s*)+)$")
_DOMAIN = re.compile(r"^Domain State: (?P<state>\S+)\s*$", re.MULTILINE)
# The legend nvidia-imex-ctl prints above its table.
CONNECTION_STATES = {
    "C": "connected",
    "I": "invalid (node not reachable)",
    "N": "never connected",
    "R": "recovering (connection lost)",
    "D": "disconnected",
    "A": "authenticating",
    "!V!": "version mismatch, communication disabled",
    "!M!": "node map mismatch, communication disabled",
}


def judge_imex(text: str, profile: GpuProfile | None) -> CheckResult:
    del profile  # the domain is judged as the daemons report it, whatever the tray
    domain = _DOMAIN.search(text)
    if domain is None:
        raise UnjudgeableOutput("no 'Domain State:' line: not nvidia-imex-ctl -N output, or cut short")
    nodes = {integer(m["index"]): m for line in text.splitlines() if (m := _NODE.match(line))}
    rows = {integer(m["index"]): m["cells"].split() for line in text.splitlines() if (m := _ROW.match(line))}
    if not nodes:
        raise UnjudgeableOutput("no 'Node #N - address - state' lines: the domain's nodes were not listed")
    if sorted(rows) != sorted(nodes) or any(len(cells) != len(nodes) for cells in rows.values()):
        raise UnjudgeableOutput(f"the connectivity table is not {len(nodes)} x {len(nodes)}: cut short")
    findings: list[Finding] = []
    if domain["state"] != "UP":
        findings.append(
            Finding(f"IMEX domain state {domain['state']}: multi-node NVLink memory sharing is unavailable")
        )
    for index, node in sorted(nodes.items()):
        if node["state"] != "READY":
            findings.append(Finding(f"IMEX daemon {node['state']}", f"node #{index} ({node['address']})"))
    for source, cells in sorted(rows.items()):
        for target, cell in enumerate(cells):
            if cell != "C" and nodes[source]["state"] == "READY" and nodes[target]["state"] == "READY":
                findings.append(Finding(f"to node #{target}: {CONNECTION_STATES[cell]}", f"node #{source}"))
    versions = sorted({n["version"] for n in nodes.values() if n["version"]})
    if len(versions) > 1:
        findings.append(Finding(f"IMEX versions differ across the domain: {', '.join(versions)}", None, "warn"))
    metrics = {
        "domain_state": domain["state"],
        "nodes": len(nodes),
        "ready": sum(n["state"] == "READY" for n in nodes.values()),
        "versions": versions,
    }
    return verdict(findings, metrics, f"IMEX domain UP, {len(nodes)} nodes READY and connected")
