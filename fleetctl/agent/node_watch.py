"""The node between checks: its InfiniBand/RoCE ports (sysfs), its mounts and its stuck
processes (procfs), read with every sample and judged against what the agent saw before.

Each condition is a catalog signature (checks/catalog/signatures.tsv, tool sysfs or procfs)
and goes through the sampler's `Debounce`: a critical one (a port down, a flapping port, a
device gone, a data mount turned read-only) becomes an event only once consecutive samples
show it, never within the grace after the boot; warnings go at first sight. The kernel's own
lines for the same faults (mlx5_core, nfs, EXT4-fs, hung tasks) come through the log
(fleetctl.agent.detect), at once.

Sysfs and procfs are file formats: a test points `sys_root` and `proc_root` at a tree of its
own."""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from pathlib import Path

from fleetctl.agent.sampler import Debounce, Sampled
from fleetctl.checks._text import UnjudgeableOutput
from fleetctl.checks.host import data_mounts, parse_mounts
from fleetctl.checks.ib import SYSFS_COUNTERS, parse_sysfs_counter, parse_sysfs_state
from fleetctl.checks.signatures import FINDING_SEVERITY, signatures

# Counters whose every step is the link going down or retraining: a flap the sample missed.
_FLAP_COUNTERS = ("link_downed",)
# Counters of errors the link layer corrected or retried: judged by their rate.
_ERROR_COUNTERS = tuple(c for c in SYSFS_COUNTERS if c not in _FLAP_COUNTERS)


@dataclass(frozen=True)
class WatchLimits:
    """When a port flaps and its errors rise too fast (the agent_watch_* settings)."""

    flap_window_s: float = 600.0  # a port's downs are counted over this window
    flaps: int = 3  # downs in the window that make a flap (gpud: 3)
    errors_per_hour: float = 600.0  # corrected link errors of one port, summed, above which it is reported
    stuck_s: float = 120.0  # a process in D state this long is stuck (the kernel's hung-task timeout)


@dataclass(frozen=True)
class Port:
    state: str  # sysfs state word: ACTIVE, DOWN, INIT, ARMED
    phys_state: str  # LinkUp, Polling, Disabled, ...
    link_layer: str  # InfiniBand or Ethernet
    counters: dict[str, int]

    @property
    def up(self) -> bool:
        return self.state == "ACTIVE" and self.phys_state == "LinkUp"


def read_ports(sys_root: Path) -> dict[str, Port] | None:
    """Every port of /sys/class/infiniband ("mlx5_0 port 1" -> Port); None when the class
    directory is absent (no RDMA driver loaded). A port whose files cannot be read is left
    out: a device that vanishes mid-read is a missing device on the next sample."""
    root = sys_root / "class" / "infiniband"
    if not root.is_dir():
        return None
    ports: dict[str, Port] = {}
    for port_dir in sorted(root.glob("*/ports/*")):
        try:
            counters = {
                name: parse_sysfs_counter((port_dir / "counters" / name).read_text())
                for name in SYSFS_COUNTERS
                if (port_dir / "counters" / name).exists()
            }
            ports[f"{port_dir.parent.parent.name} port {port_dir.name}"] = Port(
                parse_sysfs_state((port_dir / "state").read_text()),
                parse_sysfs_state((port_dir / "phys_state").read_text()),
                (port_dir / "link_layer").read_text().strip() if (port_dir / "link_layer").exists() else "InfiniBand",
                counters,
            )
        except (OSError, UnjudgeableOutput):
            continue
    return ports


def read_stuck_candidates(proc_root: Path) -> set[tuple[int, str, int]]:
    """The processes now in uninterruptible sleep (D) as (pid, command, start time): the
    start time tells a pid reused from the one seen before."""
    found = set()
    for stat in proc_root.glob("[0-9]*/stat"):
        try:
            text = stat.read_text()
        except OSError:  # the process ended between the listing and the read
            continue
        # "1234 (comm with) spaces) D 1 ...": the command ends at the last ')'.
        head, _, tail = text.rpartition(")")
        fields = tail.split()
        if len(fields) > 19 and fields[0] == "D" and "(" in head:
            found.add((int(head.split("(", 1)[0]), head.split("(", 1)[1], int(fields[19])))
    return found


@dataclass
class NodeWatch:
    """The conditions of the node's fabric, mounts and processes, sample after sample."""

    sys_root: Path | None = Path("/sys")  # None: the fabric is not watched
    proc_root: Path | None = Path("/proc")  # None: mounts and processes are not watched
    ib_port_count: int = 0  # the profile's InfiniBand compute rails: fewer is a device missing
    limits: WatchLimits = WatchLimits()
    debounce: Debounce = field(default_factory=Debounce)
    was_up: set[str] = field(default_factory=set)  # ports seen up since the agent started
    downs: dict[str, deque[float]] = field(default_factory=dict)  # when each port went down, in the window
    errors: dict[str, deque[tuple[float, int]]] = field(default_factory=dict)  # (time, summed error counters)
    last: dict[str, Port] = field(default_factory=dict)
    writable: dict[str, str] = field(default_factory=dict)  # data mounts seen read-write: target -> source
    stuck_since: dict[tuple[int, str, int], float] = field(default_factory=dict)

    def observe(self, *, now: float, settled_at: float) -> list[Sampled]:
        """What to report of this sample (read from the roots), debounced."""
        found: dict[tuple[str, str], tuple[str, str]] = {}  # (where, signature) -> (message, finding severity)
        if self.sys_root is not None:
            found |= self._fabric(read_ports(self.sys_root), now)
        if self.proc_root is not None:
            found |= self._mounts() | self._stuck(read_stuck_candidates(self.proc_root), now)
        catalog = signatures()
        out = []
        for (where, name), n in self.debounce.settle(
            {key: severity for key, (_, severity) in found.items()}, now=now, settled_at=settled_at
        ):
            message = found[(where, name)][0]
            out.append(
                Sampled(
                    f"watch:{name}:{where}:{n}",
                    f"{catalog[name].description} on {where}: {message}",
                    {"fail": "critical", "warn": "warning"}[found[(where, name)][1]],
                    name,
                )
            )
        return out

    @property
    def unconfirmed(self) -> bool:
        return self.debounce.unconfirmed

    def _fabric(self, ports: dict[str, Port] | None, now: float) -> dict[tuple[str, str], tuple[str, str]]:
        found: dict[tuple[str, str], tuple[str, str]] = {}
        ib = {name: p for name, p in (ports or {}).items() if p.link_layer == "InfiniBand"}
        if self.ib_port_count and len(ib) < self.ib_port_count:
            what = "no /sys/class/infiniband" if ports is None else f"{len(ib)} InfiniBand ports"
            found[("the node", "ib_device_missing")] = (
                f"{what}, the profile has {self.ib_port_count}",
                _severity("ib_device_missing"),
            )
        for name, port in (ports or {}).items():
            before = self.last.get(name)
            downs = self.downs.setdefault(name, deque())
            went_down = before is not None and before.up and not port.up
            flapped = (
                sum(max(0, port.counters.get(c, 0) - before.counters.get(c, 0)) for c in _FLAP_COUNTERS)
                if before is not None
                else 0
            )
            downs.extend([now] * max(int(went_down), flapped))
            while downs and downs[0] < now - self.limits.flap_window_s:
                downs.popleft()
            if port.up:
                self.was_up.add(name)
            elif name in self.was_up:
                found[(name, "ib_port_down")] = (
                    f"state {port.state}, physical state {port.phys_state}",
                    _severity("ib_port_down"),
                )
            if len(downs) >= self.limits.flaps:
                found[(name, "ib_port_flapping")] = (
                    f"down {len(downs)} times in {self.limits.flap_window_s:.0f} s",
                    _severity("ib_port_flapping"),
                )
            if rate := self._error_rate(name, port, now):
                found[(name, "ib_link_errors_rising")] = (
                    f"{rate:.0f} link errors an hour (limit {self.limits.errors_per_hour:.0f})",
                    _severity("ib_link_errors_rising"),
                )
        self.last = dict(ports or {})
        return found

    def _error_rate(self, name: str, port: Port, now: float) -> float:
        """The port's corrected errors an hour over the flap window when above the limit, else 0.
        A counter that went back (cleared) starts the window again."""
        total = sum(port.counters.get(c, 0) for c in _ERROR_COUNTERS)
        seen = self.errors.setdefault(name, deque())
        if seen and total < seen[-1][1]:
            seen.clear()
        seen.append((now, total))
        while len(seen) > 1 and seen[0][0] < now - self.limits.flap_window_s:
            seen.popleft()
        (t0, first), (t1, last) = seen[0], seen[-1]
        if t1 <= t0:
            return 0.0
        rate = (last - first) * 3600.0 / max(t1 - t0, 60.0)
        return rate if rate > self.limits.errors_per_hour else 0.0

    def _mounts(self) -> dict[tuple[str, str], tuple[str, str]]:
        assert self.proc_root is not None
        try:
            mounts = data_mounts(parse_mounts((self.proc_root / "mounts").read_text()))
        except (OSError, UnjudgeableOutput):
            return {}
        found = {}
        for target, mount in mounts.items():
            if "ro" not in mount.options:
                self.writable[target] = mount.source
            elif self.writable.get(target) == mount.source:
                found[(target, "fs_read_only_mount")] = (
                    f"{mount.fstype} {mount.source} is now mounted read-only",
                    _severity("fs_read_only_mount"),
                )
        return found

    def _stuck(self, in_d: set[tuple[int, str, int]], now: float) -> dict[tuple[str, str], tuple[str, str]]:
        self.stuck_since = {p: self.stuck_since.get(p, now) for p in in_d}
        stuck = sorted(p for p, since in self.stuck_since.items() if now - since >= self.limits.stuck_s)
        if not stuck:
            return {}
        names = ", ".join(f"{comm}[{pid}]" for pid, comm, _ in stuck[:5])
        more = f" and {len(stuck) - 5} more" if len(stuck) > 5 else ""
        return {
            ("the node", "d_state_processes"): (
                f"{len(stuck)} in D state for {self.limits.stuck_s:.0f} s or more: {names}{more}",
                _severity("d_state_processes"),
            )
        }


def _severity(name: str) -> str:
    """The catalog's severity of a signature, as a finding's word (fail, warn)."""
    return FINDING_SEVERITY[signatures()[name].severity]
