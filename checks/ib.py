"""InfiniBand: `ibstat` / `ibstatus` / `ibv_devinfo -v` port listings and perftest `ib_write_bw` results.

A port is up only when it is Active and its physical link LinkUp: Armed, Initializing (INIT)
and Down are logical states of a link that carries no traffic, and Polling, Disabled, Sleep,
PortConfigurationTraining and LinkErrorRecovery physical states of one that is not trained.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass

from fleetctl.checks._text import UnjudgeableOutput, integer, lines_of, number, verdict
from fleetctl.checks.profiles import GpuProfile
from fleetctl.checks.result import CheckResult, Finding, Status


@dataclass
class IbPort:
    device: str
    port: int
    state: str  # Active, Down, Initializing, Armed, Polling ...
    physical_state: str  # LinkUp, Polling, Disabled ...
    rate_gbps: float | None
    link_layer: str | None  # InfiniBand or Ethernet
    firmware: str | None = None

    @property
    def name(self) -> str:
        return f"{self.device} port {self.port}"


_CA = re.compile(r"^CA '(?P<device>[^']+)'")
_IBSTAT_FIELD = re.compile(r"^\s+(?P<key>[A-Za-z][A-Za-z_ ]*?):\s*(?P<value>.*?)\s*$")
_IBSTAT_PORT = re.compile(r"^\s+Port (?P<port>\d+):\s*$")
_IBSTATUS_PORT = re.compile(r"^Infiniband device '(?P<device>[^']+)' port (?P<port>\d+) status:")


def parse_ibstat(text: str) -> list[IbPort]:
    """ibstat (CA blocks with indented Port sections) or ibstatus (one block per port)."""
    ports: list[IbPort] = []
    device: str | None = None
    firmware: str | None = None
    fields: dict[str, str] | None = None

    def close_port() -> None:
        if fields is not None:
            ports.append(_port(device, fields, firmware))

    port_no = 0
    for line in text.splitlines():
        if m := _CA.match(line):
            close_port()
            device, firmware, fields = m["device"], None, None
        elif m := _IBSTATUS_PORT.match(line):
            close_port()
            device, port_no, fields, firmware = m["device"], int(m["port"]), {}, None
        elif m := _IBSTAT_PORT.match(line):
            close_port()
            port_no, fields = int(m["port"]), {}
        elif m := _IBSTAT_FIELD.match(line):
            if fields is not None:
                fields[m["key"].lower()] = m["value"]
            elif m["key"] == "Firmware version":
                firmware = m["value"]
        if fields is not None:
            fields["_port"] = str(port_no)
    close_port()
    return ports


def _port(device: str | None, fields: dict[str, str], firmware: str | None) -> IbPort:
    if device is None:
        raise UnjudgeableOutput(f"port {fields['_port']} before any CA line: not ibstat's output")
    for key in ("state", "physical state", "phys state", "rate"):
        if key in fields and not fields[key]:
            raise UnjudgeableOutput(f"{device}: empty {key!r}")
    # Link layer is the last field of a port in both tools: without it the port was cut off.
    if (
        not {"state", "rate"} <= fields.keys()
        or not {"physical state", "phys state"} & fields.keys()
        or not {
            "link layer",
            "link_layer",
        }
        & fields.keys()
    ):
        raise UnjudgeableOutput(f"{device} port {fields['_port']}: state, physical state, rate or link layer missing")
    # ibstatus prints "4: ACTIVE", "5: LinkUp", "200 Gb/sec (4X HDR)"; ibstat "Active", "LinkUp", "400".
    state = _state_name(fields["state"]).capitalize()
    physical = _state_name(fields.get("physical state", fields.get("phys state", "")))
    rate = number(fields["rate"].split()[0])
    return IbPort(
        device,
        int(fields["_port"]),
        state,
        physical,
        rate,
        fields.get("link layer", fields.get("link_layer")),
        firmware,
    )


# ---- ibv_devinfo -v --------------------------------------------------------------------------

_DEVINFO_HCA = re.compile(r"^hca_id:\s*(?P<device>\S+)\s*$")
_IS_DEVINFO = re.compile(r"^hca_id:", re.MULTILINE)
_DEVINFO_PORT = re.compile(r"^\s+port:\s*(?P<port>\d+)\s*$")
_DEVINFO_FIELD = re.compile(r"^\s+(?P<key>[a-z_]+):\s*(?P<value>.*?)\s*$")
# libibverbs' names (ibv_port_state_str, ibv_devinfo's port_phy_state_str) -> ibstat's.
_DEVINFO_STATES = {
    "PORT_NOP": "Nop",
    "PORT_DOWN": "Down",
    "PORT_INIT": "Initializing",
    "PORT_ARMED": "Armed",
    "PORT_ACTIVE": "Active",
    "PORT_ACTIVE_DEFER": "ActiveDefer",
}
_DEVINFO_PHYS = {
    "SLEEP": "Sleep",
    "POLLING": "Polling",
    "DISABLED": "Disabled",
    "PORT_CONFIGURATION_TRAINING": "PortConfigurationTraining",
    "LINK_UP": "LinkUp",
    "LINK_ERROR_RECOVERY": "LinkErrorRecovery",
    "PHY_TEST": "PhyTest",
}
_WIDTH = re.compile(r"^(?P<lanes>1|2|4|8|12)X\b")
_SPEED = re.compile(r"^(?P<gbps>\d+(?:\.\d+)?) Gbps\b")


def parse_ibv_devinfo(text: str) -> list[IbPort]:
    """`ibv_devinfo -v`: per port its state, physical state, link layer, and the rate as lanes
    times the per-lane speed ("4X (2)" x "50.0 Gbps (64)" = 200 Gb/s). Plain ibv_devinfo
    prints neither physical state nor speed: no evidence that a link is trained, so an error."""
    ports: list[IbPort] = []
    device: str | None = None
    firmware: str | None = None
    fields: dict[str, str] | None = None

    def close_port() -> None:
        if fields is not None and device is not None:
            ports.append(_devinfo_port(device, fields, firmware))

    for line in text.splitlines():
        if m := _DEVINFO_HCA.match(line):
            close_port()
            device, firmware, fields = m["device"], None, None
        elif device and (m := _DEVINFO_PORT.match(line)):
            close_port()
            fields = {"_port": m["port"]}
        elif device and (m := _DEVINFO_FIELD.match(line)):
            if fields is not None:
                fields[m["key"]] = m["value"]
            elif m["key"] == "fw_ver":
                firmware = m["value"]
    close_port()
    return ports


def _devinfo_port(device: str, fields: dict[str, str], firmware: str | None) -> IbPort:
    name = f"{device} port {fields['_port']}"
    if "link_layer" not in fields or "state" not in fields:
        raise UnjudgeableOutput(f"{name}: state or link_layer missing: cut short")
    if "phys_state" not in fields or "active_speed" not in fields:
        raise UnjudgeableOutput(f"{name}: no phys_state or active_speed (plain ibv_devinfo): run ibv_devinfo -v")
    state = _DEVINFO_STATES.get(fields["state"].split(" (")[0])
    physical = _DEVINFO_PHYS.get(fields["phys_state"].split(" (")[0])
    if state is None or physical is None:
        raise UnjudgeableOutput(f"{name}: unknown state {fields['state'][:30]!r} / {fields['phys_state'][:30]!r}")
    width, speed = _WIDTH.match(fields.get("active_width", "")), _SPEED.match(fields["active_speed"])
    # "invalid speed (0)": a port that trained no link has no rate.
    rate = int(width["lanes"]) * float(speed["gbps"]) if width and speed else None
    if rate is None and fields["active_speed"].split(" (")[0] not in ("invalid speed",):
        raise UnjudgeableOutput(f"{name}: unreadable active_width/active_speed {fields['active_speed'][:30]!r}")
    return IbPort(device, int(fields["_port"]), state, physical, rate, fields["link_layer"], firmware)


def _state_name(value: str) -> str:
    """'4: ACTIVE' (ibstatus: code and name; the code must be a number) or 'Active' (ibstat)."""
    if ":" in value:
        code, value = value.split(":", 1)
        integer(code)
    return value.strip()


# ---- ib_write_bw --------------------------------------------------------------------------

_BW_HEADER = re.compile(
    r"^\s*#bytes\s+#iterations\s+BW peak\[(?P<unit>Gb/sec|MB/sec)\]\s+BW average\[(?:Gb/sec|MB/sec)\]"
)
_PERFTEST_ERROR = re.compile(r"^\s*(?:Couldn't|Failed to|Unable to|Error|ERRNO|RDMA CM event error)", re.I | re.M)
_DASHES = re.compile(r"^\s*-{20,}\s*$")


@dataclass
class IbWriteBwResult:
    device: str | None
    link_type: str | None
    rows: list[tuple[int, float, float]]  # bytes, peak, average (Gb/s)
    complete: bool
    errors: list[str]


def parse_ib_write_bw(text: str) -> IbWriteBwResult:
    device = link = None
    rows: list[tuple[int, float, float]] = []
    errors: list[str] = []
    scale, in_table, complete = 1.0, False, False
    for line in lines_of(text):
        if m := re.search(r"Device\s*:\s*(\S+)", line):
            device = m[1]
        if m := re.search(r"Link type\s*:\s*(\S+)", line):
            link = m[1]
        if _PERFTEST_ERROR.match(line):
            errors.append(line.strip())
        elif m := _BW_HEADER.match(line):
            # Without --report_gbits perftest prints MB/sec with MB = 2^20 bytes.
            scale, in_table = (1.0 if m["unit"] == "Gb/sec" else 8 * 2**20 / 1e9), True
        elif in_table and _DASHES.match(line):
            complete, in_table = bool(rows), False
        elif in_table and line.strip():
            cells = line.split()
            if len(cells) < 4:
                raise UnjudgeableOutput(f"short ib_write_bw row: {line.strip()!r}")
            integer(cells[1])  # iterations: read only to reject garbage
            rows.append((integer(cells[0]), number(cells[2]) * scale, number(cells[3]) * scale))
            number(cells[4]) if len(cells) > 4 else None  # MsgRate: read only to reject garbage
    return IbWriteBwResult(device, link, rows, complete, errors)


# ---- judgement ------------------------------------------------------------------------------


def judge_ib(text: str, profile: GpuProfile | None) -> CheckResult:
    is_ibstat = "CA '" in text or "Infiniband device '" in text or bool(_IS_DEVINFO.search(text))
    if "BW average" in text or "RDMA_Write BW Test" in text or (_PERFTEST_ERROR.search(text) and not is_ibstat):
        return _judge_write_bw(text, profile)
    ports = parse_ibv_devinfo(text) if _IS_DEVINFO.search(text) else parse_ibstat(text)
    if not ports:
        raise UnjudgeableOutput("not ibstat, ibstatus, ibv_devinfo -v or ib_write_bw output")
    ib_ports = [p for p in ports if _layer(p) == INFINIBAND]
    eth_ports = [p for p in ports if _layer(p) == ETHERNET]
    rails = _rail_layers(ports, profile)
    findings: list[Finding] = []
    judged_names: set[str] = set()
    for layer, candidates, expected, rate in rails:
        if expected <= 0:
            continue
        judged_names.update(p.name for p in candidates)
        up = [p for p in candidates if _is_up(p)]
        fast = [p for p in up if p.rate_gbps is not None and p.rate_gbps >= rate]
        for port in candidates:
            # With the rails the profile needs up, another port of the layer is not one of them.
            severity = "fail" if len(fast) < expected else "info"
            if port not in up:
                findings.append(Finding(f"{port.state} / {port.physical_state} ({layer})", port.name, severity))
            elif port not in fast:
                findings.append(
                    Finding(f"rate {port.rate_gbps:g} Gb/s, expected {rate:g} ({layer})", port.name, severity)
                )
        if len(fast) < expected:
            findings.append(
                Finding(
                    f"{len(fast)} {layer} rails Active/LinkUp at {rate:g} Gb/s, "
                    f"{profile.name if profile else 'this host'} needs {expected}"
                )
            )
    others = [p for p in ports if p.name not in judged_names]
    findings += [
        Finding(
            f"{p.state} / {p.physical_state} ({p.link_layer or 'link layer ?'}): not a compute rail, not judged",
            p.name,
            "info",
        )
        for p in others
        if not _is_up(p)
    ]
    rail_ports = [p for p in ports if p.name in judged_names]
    metrics = {
        "ports": len(ports),
        "ib_ports": len(ib_ports),
        "ethernet_ports": len(eth_ports),
        "rails": len(rail_ports),
        "active_rails": sum(_is_up(p) for p in rail_ports),
        "active_ports": sum(p.state == "Active" for p in ports),
        "down_ports": [p.name for p in ports if not _is_up(p)],
        "min_ib_rate_gbps": min(
            (p.rate_gbps for p in ib_ports if p.state == "Active" and p.rate_gbps is not None), default=None
        ),
        "firmware_versions": sorted({p.firmware for p in ports if p.firmware}),
    }
    if not rail_ports:
        # Nothing the profile calls a rail was listed: no evidence the fabric is up.
        return CheckResult(Status.ERROR, metrics, findings, "no port of the expected link layer: rails not judged")
    return verdict(
        findings,
        metrics,
        f"{metrics['active_rails']} of {len(rail_ports)} rails Active/LinkUp"
        + (f", {len(others)} other ports not judged" if others else ""),
    )


INFINIBAND, ETHERNET = "InfiniBand", "Ethernet"


def _is_up(port: IbPort) -> bool:
    """Active and LinkUp, exactly: any other logical or physical state carries no traffic."""
    return port.state == "Active" and port.physical_state == "LinkUp"


def _rail_layers(ports: list[IbPort], profile: GpuProfile | None) -> list[tuple[str, list[IbPort], int, float]]:
    """(link layer, its ports, rails the profile needs, their rate) per layer to judge: the
    profile's InfiniBand and RoCE rails; without a profile, the InfiniBand ports, or the
    Ethernet ones on a host that has no InfiniBand at all."""
    ib_ports = [p for p in ports if _layer(p) == INFINIBAND]
    eth_ports = [p for p in ports if _layer(p) == ETHERNET]
    if profile is not None and (roce := _roce_only_rails(ib_ports, eth_ports, profile)):
        return [roce]
    if profile is not None:
        return [
            (INFINIBAND, ib_ports, profile.ib_port_count, profile.ib_rate_gbps),
            (ETHERNET, eth_ports, profile.roce_port_count, profile.roce_rate_gbps),
        ]
    layer, judged = (INFINIBAND, ib_ports) if ib_ports else (ETHERNET, eth_ports)
    return [(layer, judged, len(judged), 0.0)]


def _roce_only_rails(
    ib_ports: list[IbPort], eth_ports: list[IbPort], profile: GpuProfile
) -> tuple[str, list[IbPort], int, float] | None:
    """A host with no InfiniBand port at all, judged under a profile whose compute fabric is
    InfiniBand (no RoCE rails of its own): its Ethernet (RoCE) ports are its rails, held to the
    profile's rail count and rate. Otherwise no rail of the expected layer would be listed and
    the check could say nothing, even where the ports are plainly down."""
    if ib_ports or not eth_ports or profile.roce_port_count or not profile.ib_port_count:
        return None
    return (f"{ETHERNET} (RoCE)", eth_ports, profile.ib_port_count, profile.ib_rate_gbps)


def _layer(port: IbPort) -> str:
    """ibstat and ibstatus both print the link layer; an old ibstat without it is InfiniBand."""
    return ETHERNET if (port.link_layer or "").lower() == "ethernet" else INFINIBAND


def _judge_write_bw(text: str, profile: GpuProfile | None) -> CheckResult:
    run = parse_ib_write_bw(text)
    metrics = {
        "bw_avg_gbps": run.rows[-1][2] if run.rows else None,
        "bw_peak_gbps": run.rows[-1][1] if run.rows else None,
        "msg_size_bytes": run.rows[-1][0] if run.rows else None,
        "device": run.device,
        "link_type": run.link_type,
    }
    if run.errors and not run.complete:
        return verdict([Finding(f"ib_write_bw failed: {run.errors[0]}", run.device)], metrics, "")
    if not run.rows:
        raise UnjudgeableOutput("ib_write_bw printed no bandwidth rows")
    if not run.complete:
        raise UnjudgeableOutput("ib_write_bw table not closed: the run was cut short")
    findings = []
    bw_avg = run.rows[-1][2]
    if profile and (f := profile.ib_write_bw_gbps.judge(bw_avg, "ib_write_bw average", "Gb/s", run.device)):
        findings.append(f)
    return verdict(findings, metrics, f"ib_write_bw average {bw_avg:g} Gb/s on {run.device}")


# ---- perfquery: error counters read before and after a check ------------------------------

# Counters whose growth during a check means the link misbehaved, with what growth means.
# A link that went down or had to retrain mid-check flaps: that fails. Symbol and receive
# errors are corrected or retried by the link layer: growth is worth a look.
PERFQUERY_COUNTERS = {
    "LinkDownedCounter": "fail",
    "LinkErrorRecoveryCounter": "fail",
    "SymbolErrorCounter": "warn",
    "PortRcvErrors": "warn",
    "PortRcvRemotePhysicalErrors": "warn",
    "LocalLinkIntegrityErrors": "warn",
    "ExcessiveBufferOverrunErrors": "warn",
    "PortXmitDiscards": "warn",
}
# The widths the InfiniBand spec gives these counters in the basic PortCounters attribute:
# one at its maximum has stopped counting, so its growth can no longer be seen.
PERFQUERY_SATURATION = {
    "LinkDownedCounter": 0xFF,
    "LinkErrorRecoveryCounter": 0xFF,
    "SymbolErrorCounter": 0xFFFF,
    "PortRcvErrors": 0xFFFF,
    "PortRcvRemotePhysicalErrors": 0xFFFF,
    "PortXmitDiscards": 0xFFFF,
    "LocalLinkIntegrityErrors": 0xF,
    "ExcessiveBufferOverrunErrors": 0xF,
}
# Without these four a block was cut short or is not a port-counters block.
_PERFQUERY_REQUIRED = ("SymbolErrorCounter", "LinkErrorRecoveryCounter", "LinkDownedCounter", "PortRcvErrors")
_COUNTER_MAX = 2**64 - 1
_PERFQUERY_HEADER = re.compile(r"^# Port (?:extended )?counters: Lid (?P<lid>\d{1,5}) port (?P<port>\d{1,3})\b")
_PERFQUERY_FIELD = re.compile(r"^(?P<key>[A-Za-z][A-Za-z0-9]*):\.+(?P<value>\S+)\s*$")


@dataclass(frozen=True)
class PortCounters:
    lid: int
    port: int
    counters: dict[str, int]

    @property
    def name(self) -> str:
        return f"lid {self.lid} port {self.port}"


def parse_perfquery(text: str) -> list[PortCounters]:
    """`perfquery [-x]` port-counter blocks. A number out of the 64-bit range, or a block
    without the four link error counters, is not perfquery output."""
    blocks: list[PortCounters] = []
    for line in text.splitlines():
        if m := _PERFQUERY_HEADER.match(line):
            blocks.append(PortCounters(int(m["lid"]), int(m["port"]), {}))
        elif (
            blocks
            and (m := _PERFQUERY_FIELD.match(line))
            and m["key"] not in ("PortSelect", "CounterSelect", "CounterSelect2")
        ):
            value = integer(m["value"])
            if not 0 <= value <= _COUNTER_MAX:
                raise UnjudgeableOutput(f"{blocks[-1].name}: {m['key']} {m['value'][:24]} is out of the counter range")
            blocks[-1].counters[m["key"]] = value
    for block in blocks:
        if missing := [c for c in _PERFQUERY_REQUIRED if c not in block.counters]:
            raise UnjudgeableOutput(f"perfquery block for {block.name} has no {missing[0]}: cut short")
    if not blocks:
        raise UnjudgeableOutput("not perfquery output (no '# Port counters: Lid ... port ...' block)")
    return blocks


def judge_counter_increase(before: str, after: str) -> CheckResult:
    """The link error counters read before a check and after it: what grew during the check
    is judged, not what a port collected since its counters were last cleared."""
    first = {(b.lid, b.port): b for b in parse_perfquery(before)}
    second = {(b.lid, b.port): b for b in parse_perfquery(after)}
    if missing := sorted(set(first) - set(second)):
        raise UnjudgeableOutput(f"lid {missing[0][0]} port {missing[0][1]} read before the check but not after")
    findings: list[Finding] = []
    increases: dict[str, dict[str, int]] = {}
    for key, old in first.items():
        new = second[key]
        for counter, severity in PERFQUERY_COUNTERS.items():
            if counter not in old.counters or counter not in new.counters:
                continue
            was, now = old.counters[counter], new.counters[counter]
            if now < was:
                raise UnjudgeableOutput(
                    f"{old.name}: {counter} went from {was} to {now}: the counters were reset "
                    "during the check, its increase cannot be known"
                )
            if was >= PERFQUERY_SATURATION[counter]:
                raise UnjudgeableOutput(
                    f"{old.name}: {counter} is saturated at {was}: clear the counters (perfquery -R) before the check"
                )
            if now > was:
                increases.setdefault(old.name, {})[counter] = now - was
                findings.append(
                    Finding(f"{counter} rose by {now - was} during the check ({was} -> {now})", old.name, severity)
                )
    metrics = {"ports": len(first), "increases": increases}
    return verdict(findings, metrics, f"no link error counter rose on {len(first)} ports during the check")


# ---- every rail: ib_write_bw per HCA, error counters read around it ------------------------

# A device name as the kernel gives it (mlx5_0, mlx5_ib3, mlx5_bond_0): anything else in
# ibstat's output is not put in a command.
_DEVICE_NAME = re.compile(r"[A-Za-z0-9_.-]{1,64}")
WRITE_BW_SECONDS = 5  # -D: long enough for a steady average, short enough for 8 rails in a burn-in


def rail_ports(ibstat_text: str, profile: GpuProfile | None) -> list[IbPort]:
    """The compute rails ibstat lists (every port of the layers the profile expects), in order."""
    ports = parse_ibstat(ibstat_text)
    rails = [p for layer, candidates, expected, _ in _rail_layers(ports, profile) if expected > 0 for p in candidates]
    if not rails:
        raise UnjudgeableOutput("ibstat lists no port of the expected link layer: no rail to test")
    for port in rails:
        if not _DEVICE_NAME.fullmatch(port.device):
            raise UnjudgeableOutput(f"ibstat names a device {port.device[:40]!r}, not a kernel device name")
    return rails


def rails_script(ibstat_text: str, profile: GpuProfile | None) -> tuple[str, ...]:
    """argv of one shell run that tests every rail ibstat lists: ibstat again (what the judge
    holds the steps to), each InfiniBand rail's error counters, ib_write_bw through each rail
    (loopback, one rail at a time), the counters again. Each output under its step marker."""
    from fleetctl.checks.transcript import marker

    rails = rail_ports(ibstat_text, profile)
    ib = [p for p in rails if _layer(p) == INFINIBAND]

    def step(label: str, command: str) -> str:
        return f"echo {shlex.quote(marker(label))}; {command}"

    def perfquery(port: IbPort) -> str:
        return f"perfquery -x -C {shlex.quote(port.device)} -P {port.port}"

    def write_bw(port: IbPort) -> str:
        bw = f"ib_write_bw -d {shlex.quote(port.device)} -i {port.port} -F --report_gbits -D {WRITE_BW_SECONDS}"
        return f"{bw} >/dev/null 2>&1 & sleep 1; {bw} localhost 2>&1; wait"

    steps = [step("ibstat", "ibstat")]
    steps += [step(f"perfquery before {p.device} {p.port}", perfquery(p)) for p in ib]
    steps += [step(f"ib_write_bw {p.device} {p.port}", write_bw(p)) for p in rails]
    steps += [step(f"perfquery after {p.device} {p.port}", perfquery(p)) for p in ib]
    return ("sh", "-c", "; ".join(steps))


def judge_ib_rails(text: str, profile: GpuProfile | None) -> CheckResult:
    """Every rail's ib_write_bw against the profile's floor, and every InfiniBand rail's error
    counters by their increase over the run. A pass needs each rail ibstat lists tested, and
    as many rails as the profile needs."""
    from fleetctl.checks.transcript import read_transcript

    steps = {s.label: s for s in read_transcript(text)}
    if "ibstat" not in steps:
        raise UnjudgeableOutput("no 'ibstat' step in the output: not an every-rail run")
    rails = rail_ports(steps["ibstat"].body, profile)
    findings: list[Finding] = []
    unjudged: list[str] = []
    bandwidth: dict[str, float] = {}
    increases: dict[str, dict[str, int]] = {}

    def body(label: str) -> str:
        found = steps.get(label)
        if found is None or found.cut:
            raise UnjudgeableOutput(f"no {'complete ' if found else ''}'{label}' step: the run was cut short")
        return found.body

    for port in rails:
        name = f"{port.device} port {port.port}"
        try:
            run = _judge_write_bw(body(f"ib_write_bw {port.device} {port.port}"), profile)
            if run.metrics["device"] not in (None, port.device):
                raise UnjudgeableOutput(f"the ib_write_bw step of {port.device} tested {run.metrics['device']}")
            if run.metrics["bw_avg_gbps"] is not None:
                bandwidth[name] = run.metrics["bw_avg_gbps"]
            findings += [Finding(f.what, name, f.severity) for f in run.findings]
            if _layer(port) == INFINIBAND:
                counters = judge_counter_increase(
                    body(f"perfquery before {port.device} {port.port}"),
                    body(f"perfquery after {port.device} {port.port}"),
                )
                findings += [Finding(f.what, name, f.severity) for f in counters.findings]
                for grown in counters.metrics["increases"].values():  # one port per rail
                    increases[name] = grown
        except UnjudgeableOutput as exc:
            unjudged.append(f"{name}: {exc}")
    if profile is not None:
        for layer, candidates, expected, _ in _rail_layers(rails, profile):
            if expected > 0 and len(candidates) < expected:
                findings.append(Finding(f"{len(candidates)} {layer} rails tested, {profile.name} needs {expected}"))
    metrics = {
        "rails": len(rails),
        "bw_avg_gbps": bandwidth,
        "min_bw_avg_gbps": min(bandwidth.values(), default=None),
        "counter_increases": increases,
        "unjudged": unjudged,
    }
    if unjudged and not any(f.severity == "fail" for f in findings):
        return CheckResult(
            Status.ERROR,
            metrics,
            findings,
            unjudged[0] + (f" (and {len(unjudged) - 1} more)" if len(unjudged) > 1 else ""),
        )
    findings += [Finding(f"not judged: {u}", None, "info") for u in unjudged]
    return verdict(
        findings,
        metrics,
        f"{len(rails)} rails: ib_write_bw {metrics['min_bw_avg_gbps']:g} Gb/s or more, no link error counter rose",
    )


# ---- sysfs: /sys/class/infiniband/<device>/ports/<n>/ -------------------------------------

# The error counters of ports/<n>/counters/ (Linux Documentation/ABI/stable/sysfs-class-infiniband),
# each as the perfquery counter it is (PERFQUERY_COUNTERS says what its growth means).
SYSFS_COUNTERS = {
    "link_downed": "LinkDownedCounter",
    "link_error_recovery": "LinkErrorRecoveryCounter",
    "symbol_error": "SymbolErrorCounter",
    "port_rcv_errors": "PortRcvErrors",
    "port_rcv_remote_physical_errors": "PortRcvRemotePhysicalErrors",
    "local_link_integrity_errors": "LocalLinkIntegrityErrors",
    "excessive_buffer_overrun_errors": "ExcessiveBufferOverrunErrors",
    "port_xmit_discards": "PortXmitDiscards",
}
_SYSFS_STATE = re.compile(r"^\s*(?P<code>\d{1,2}): (?P<word>[A-Za-z_]+)\s*$")


def parse_sysfs_state(text: str) -> str:
    """The word of a port's sysfs `state` ("4: ACTIVE") or `phys_state` ("5: LinkUp") file."""
    if not (m := _SYSFS_STATE.match(text)):
        raise UnjudgeableOutput(f"not a sysfs port state: {text.strip()[:40]!r}")
    return m["word"]


def parse_sysfs_counter(text: str) -> int:
    """A sysfs port counter: one decimal number in the 64-bit range."""
    value = integer(text.strip())
    if not 0 <= value <= _COUNTER_MAX:
        raise UnjudgeableOutput(f"sysfs counter {text.strip()[:24]!r} is out of the counter range")
    return value
