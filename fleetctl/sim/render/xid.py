"""The kernel log as dmesg, dmesg -T and journalctl -k print it (read by checks.xid)."""

from __future__ import annotations

import time

from fleetctl.sim.node import NodeState, ToolOutput
from fleetctl.sim.render._layout import ctime


def render_kernel_log(node: NodeState, style: str) -> ToolOutput:
    """Kernel messages since boot. style: "dmesg" (seconds since boot), "dmesg-T" (wall
    clock, like `dmesg -T`), "journal" (`journalctl -k`)."""
    lines = []
    for event in sorted(node.kernel_events, key=lambda e: e.at):
        if style == "dmesg":
            lines.append(f"[{event.at - node.boot_time:12.6f}] {event.text}")
        elif style == "dmesg-T":
            lines.append(f"[{ctime(event.at)}] {event.text}")
        else:
            stamp = time.strftime("%b %d %H:%M:%S", time.gmtime(event.at))
            lines.append(f"{stamp} {node.hostname} kernel: {event.text}")
    return ToolOutput("\n".join(lines) + "\n")
