"""`ibstat` and perftest `ib_write_bw` (read by checks.ib)."""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass

from fleetctl.sim.faults import FLAP_PERIOD_S
from fleetctl.sim.node import HcaState, NodeState, ToolOutput


def _eui64(mac: int) -> int:
    """An Ethernet port's GUID: the MAC with fffe inserted and the local bit flipped."""
    return ((mac >> 24) << 40 | 0xFFFE << 24 | mac & 0xFFFFFF) ^ (0x02 << 56)


def _named(node: NodeState, devices: Sequence[str]) -> list[HcaState] | None:
    """The node's HCAs a tool was asked about (every one when none is named); None when a named
    one is not there (each tool says so in its own words)."""
    hcas = [h for h in node.hcas if not devices or h.name in devices]
    return None if devices and not hcas else hcas


def render_ibstat(node: NodeState, devices: Sequence[str]) -> ToolOutput:
    """`ibstat [CA]`: every HCA, or the one named."""
    hcas = _named(node, devices)
    if hcas is None:
        return ToolOutput(
            "",
            f"ibpanic: [{node.hostname}] main: '{devices[0]}' IB device can't be found: No such file or directory\n",
            255,
        )
    lines = []
    for hca in hcas:
        ethernet = hca.link_layer == "Ethernet"
        port_guid = _eui64(hca.mac) if ethernet else hca.guid
        lines += [
            f"CA '{hca.name}'",
            f"\tCA type: {hca.ca_type}",
            "\tNumber of ports: 1",
            f"\tFirmware version: {hca.firmware}",
            "\tHardware version: 0",
            f"\tNode GUID: 0x{hca.guid:016x}",
            f"\tSystem image GUID: 0x{hca.guid:016x}",
            "\tPort 1:",
            f"\t\tState: {hca.state}",
            f"\t\tPhysical state: {hca.physical_state}",
            f"\t\tRate: {hca.rate_gbps}",
            f"\t\tBase lid: {0 if ethernet else hca.lid}",
            "\t\tLMC: 0",
            f"\t\tSM lid: {0 if ethernet else 1}",
            f"\t\tCapability mask: {'0x00010000' if ethernet else '0xa751e848'}",
            f"\t\tPort GUID: 0x{port_guid:016x}",
            f"\t\tLink layer: {hca.link_layer}",
        ]
    return ToolOutput("\n".join(lines) + "\n")


# libibverbs' per-lane speeds as ibv_devinfo prints them ("50.0 Gbps (64)": HDR; NDR is 100).
_LANE_SPEEDS = {2.5: 1, 5.0: 2, 10.0: 4, 14.0: 16, 25.0: 32, 50.0: 64, 100.0: 128, 200.0: 256}
_DEVINFO_STATE = {
    "Active": "PORT_ACTIVE (4)",
    "Down": "PORT_DOWN (1)",
    "Initializing": "PORT_INIT (2)",
    "Armed": "PORT_ARMED (3)",
}
_DEVINFO_PHYS = {"LinkUp": "LINK_UP (5)", "Polling": "POLLING (2)", "Disabled": "DISABLED (3)", "Sleep": "SLEEP (1)"}


def _guid(value: int) -> str:
    """ibv_devinfo's GUID form: four groups of four hex digits (88e9:a4ff:ff25:a462)."""
    text = f"{value:016x}"
    return ":".join(text[i : i + 4] for i in range(0, 16, 4))


def render_ibv_devinfo(node: NodeState, devices: Sequence[str], verbose: bool) -> ToolOutput:
    """`ibv_devinfo [-v] [-d DEVICE]`, in the layout of openucx/ucx#9908's (ConnectX-6 HDR, -vv).
    Plain ibv_devinfo prints no physical state and no speed, as the real one: no evidence of a
    trained link (checks.ib judges it unreadable). The rate ibstat shows is 4 lanes at its quarter."""
    hcas = _named(node, devices)
    if hcas is None:
        return ToolOutput("", f"IB device '{devices[0]}' wasn't found\n", 255)
    lines = []
    for hca in hcas:
        ethernet = hca.link_layer == "Ethernet"
        guid = _eui64(hca.mac) if ethernet else hca.guid
        lines += [
            f"hca_id:\t{hca.name}",
            "\ttransport:\t\t\tInfiniBand (0)",
            f"\tfw_ver:\t\t\t\t{hca.firmware}",
            f"\tnode_guid:\t\t\t{_guid(guid)}",
            f"\tsys_image_guid:\t\t\t{_guid(guid)}",
            "\tvendor_id:\t\t\t0x02c9",
            f"\tvendor_part_id:\t\t\t{hca.ca_type.removeprefix('MT')}",
            "\thw_ver:\t\t\t\t0x0",
            f"\tboard_id:\t\t\t{node.profile.hca.psid if hca.ca_type == node.profile.hca.ca_type else 'MT_0000000884'}",
            "\tphys_port_cnt:\t\t\t1",
            "\t\tport:\t1",
            f"\t\t\tstate:\t\t\t{_DEVINFO_STATE.get(hca.state, 'PORT_DOWN (1)')}",
            "\t\t\tmax_mtu:\t\t4096 (5)",
            f"\t\t\tactive_mtu:\t\t{'1024 (3)' if ethernet else '4096 (5)'}",
            f"\t\t\tsm_lid:\t\t\t{0 if ethernet else 1}",
            f"\t\t\tport_lid:\t\t{0 if ethernet else hca.lid}",
            "\t\t\tport_lmc:\t\t0x00",
            f"\t\t\tlink_layer:\t\t{hca.link_layer}",
        ]
        if verbose:
            lane = hca.rate_gbps / 4
            lines += [
                "\t\t\tactive_width:\t\t4X (2)",
                f"\t\t\tactive_speed:\t\t{lane:.1f} Gbps ({_LANE_SPEEDS.get(lane, 0)})",
                f"\t\t\tphys_state:\t\t{_DEVINFO_PHYS.get(hca.physical_state, 'POLLING (2)')}",
            ]
        lines.append("")
    return ToolOutput("\n".join(lines) + "\n")


@dataclass(frozen=True)
class IbWriteBwRun:
    device: str
    size: int
    qps: int
    duration_s: float | None  # -D: run for a time instead of a number of iterations
    iterations: int
    report_gbits: bool
    server: str | None  # the peer to connect to; None = this side is the server
    sweep: bool  # -a: every size from 2 B to 8 MiB


_PERFTEST_RULE = "-" * 87


def render_ib_write_bw(node: NodeState, run: IbWriteBwRun, rng: random.Random) -> tuple[ToolOutput, float]:
    """perftest ib_write_bw, one side of the test; and its seconds on the wire."""
    hca = next((h for h in node.hcas if h.name == run.device), None)
    if hca is None:
        return ToolOutput(
            "", f" Couldn't find device {run.device}\n Unable to find the Infiniband/RoCE device\n", 1
        ), 0.1
    if hca.state != "Active":
        return ToolOutput(
            "",
            f" Port number 1 state is {hca.state}\n Couldn't set the link layer\n Couldn't get context for the device\n",
            1,
        ), 0.5
    out = []
    if run.duration_s is not None:
        out.append(" WARNING: BW peak won't be measured in this run.")
    unit = "Gb/sec" if run.report_gbits else "MB/sec"
    qpn = rng.randint(0x20, 0xF000)
    out += [
        _PERFTEST_RULE,
        "                    RDMA_Write BW Test",
        f" Dual-port       : OFF\t\tDevice         : {hca.name}",
        f" Number of qps   : {run.qps}\t\tTransport type : IB",
        " Connection type : RC\t\tUsing SRQ      : OFF",
        " PCIe relax order: ON\t\tLock-free      : OFF",
        " ibv_wr* API     : ON\t\tUsing DDP      : OFF",
        " TX depth        : 128",
        " CQ Moderation   : 1",
        " Mtu             : 4096[B]",
        f" Link type       : {'Ethernet' if hca.link_layer == 'Ethernet' else 'IB'}",
        " Max inline data : 0[B]",
        " rdma_cm QPs\t : OFF",
        " Data ex. method : Ethernet",
        _PERFTEST_RULE,
        f" local address: LID {hca.lid:#06x} QPN {qpn:#06x} PSN {rng.getrandbits(24):#08x} RKey 0x002440 VAddr 0x007f2e5f64b000",
        f" remote address: LID {hca.lid:#06x} QPN {qpn + 1:#06x} PSN {rng.getrandbits(24):#08x} RKey 0x002442 VAddr 0x007f443b2f8000",
        _PERFTEST_RULE,
        f" #bytes     #iterations    BW peak[{unit}]    BW average[{unit}]   MsgRate[Mpps]",
    ]
    sizes = [2**k for k in range(1, 24)] if run.sweep else [run.size]
    seconds = 0.0
    for size in sizes:
        # Small messages are bound by the message rate, large ones by the link.
        gbps = min(hca.write_bw_gbps, size * 8 * 90e6 / 1e9) * rng.gauss(1.0, 0.003)
        msg_rate = gbps * 1e9 / 8 / size / 1e6
        iterations = int(msg_rate * 1e6 * run.duration_s) if run.duration_s is not None else run.iterations
        seconds += run.duration_s if run.duration_s is not None else iterations / (msg_rate * 1e6)
        value = gbps if run.report_gbits else gbps * 1e9 / 8 / 2**20
        peak = 0.0 if run.duration_s is not None else value * 1.002
        out.append(
            f" {size:<7d}    {iterations:<10d}       {peak:<7.2f}            {value:<7.2f}\t\t     {msg_rate:<7.6f}"
        )
    out.append(_PERFTEST_RULE)
    return ToolOutput("\n".join(out) + "\n"), seconds


# `perfquery -x` fields in the order infiniband-diags prints them (a real block is in
# tests/fixtures/checks/ib/perfquery_x_lid1719_before.out).
_PERFQUERY_FIELDS = (
    "PortXmitData",
    "PortRcvData",
    "PortXmitPkts",
    "PortRcvPkts",
    "PortUnicastXmitPkts",
    "PortUnicastRcvPkts",
    "PortMulticastXmitPkts",
    "PortMulticastRcvPkts",
    "CounterSelect2",
    "SymbolErrorCounter",
    "LinkErrorRecoveryCounter",
    "LinkDownedCounter",
    "PortRcvErrors",
    "PortRcvRemotePhysicalErrors",
    "PortRcvSwitchRelayErrors",
    "PortXmitDiscards",
    "PortXmitConstraintErrors",
    "PortRcvConstraintErrors",
    "LocalLinkIntegrityErrors",
    "ExcessiveBufferOverrunErrors",
    "VL15Dropped",
    "PortXmitWait",
    "QP1Dropped",
)


def render_perfquery(node: NodeState, device: str, port: int, at: float) -> ToolOutput:
    """`perfquery -x -C DEVICE -P PORT` at time `at`: the port's extended counters. A link
    that flaps goes down (and recovers) under load: once per FLAP_PERIOD_S of the check that
    runs (`at` past the node's `now`), so its counters grow over a check and never saturate."""
    hca = next((h for h in node.hcas if h.name == device), None)
    if hca is None or port != 1:
        return ToolOutput(
            "",
            f"ibwarn: [{node.hostname}] mad_rpc_open_port: can't open UMAD port ({device}:{port})\n"
            f"perfquery: iberror: failed: Failed to open '{device}' port '{port}'\n",
            255,
        )
    if hca.state != "Active" or hca.link_layer != "InfiniBand":
        return ToolOutput(
            "",
            f"ibwarn: [{node.hostname}] mad_rpc: _do_madrpc failed; dport (Lid {hca.lid})\n"
            f"perfquery: iberror: failed: perfquery query failed\n",
            255,
        )
    flaps = int(max(at - node.now, 0.0) // FLAP_PERIOD_S) if hca.flapping_since is not None else 0
    up_s = max(at - node.boot_time, 0.0)
    # Traffic grows with uptime at a fraction of the link rate: 4-byte words, as the spec counts data.
    words = int(up_s * hca.rate_gbps * 1e9 / 8 / 4 * 0.05)
    packets = words // 1024
    values = {
        "PortXmitData": words,
        "PortRcvData": words * 9 // 10,
        "PortXmitPkts": packets,
        "PortRcvPkts": packets * 9 // 10,
        "PortUnicastXmitPkts": packets,
        "PortUnicastRcvPkts": packets * 9 // 10,
        "PortMulticastXmitPkts": 0,
        "PortMulticastRcvPkts": 0,
        "CounterSelect2": "0x00000000",
        "SymbolErrorCounter": min(flaps * 13, 0xFFFF),
        "LinkErrorRecoveryCounter": min(flaps, 0xFF),
        "LinkDownedCounter": min(flaps, 0xFF),
        "PortXmitWait": words // 1600,
    }
    lines = [
        f"# Port extended counters: Lid {hca.lid} port {port} (CapMask: 0x5300 CapMask2: 0x0000002)",
        f"{'PortSelect:':.<33}{port}",
        f"{'CounterSelect:':.<33}0x0000",
    ]
    lines += [f"{name + ':':.<33}{values.get(name, 0)}" for name in _PERFQUERY_FIELDS]
    return ToolOutput("\n".join(lines) + "\n")
