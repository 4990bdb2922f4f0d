"""The node watch (fleetctl/agent/node_watch.py) over real-format sysfs and procfs trees.

The trees are built under tmp_path in the kernel's file formats: a port's `state` and
`phys_state` as leptonai/gpud components/accelerator/nvidia/infiniband/class/testdata/
sys-class-infiniband-h100.0 holds them ("4: ACTIVE", "5: LinkUp"; a down port "1: DOWN",
"2: Polling", Linux Documentation/ABI/stable/sysfs-class-infiniband), its counters one decimal
number a file; /proc/mounts as proc(5) gives it; /proc/[pid]/stat with the state in field 3
and the start time in field 22 (proc(5)).
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from fleetctl.agent.follow import FileSource
from fleetctl.agent.node_watch import NodeWatch, WatchLimits, read_ports, read_stuck_candidates
from fleetctl.agent.runner import Agent, AgentConfig
from fleetctl.agent.sampler import Confirmation, Debounce
from fleetctl.agent.transport import IntakeTransport
from fleetctl.intake.credentials import new_credential, token_hash
from fleetctl.server_tls import tls_context
from tests.intake.test_hostile import hashes, make_intake  # noqa: F401 - fixtures
from tests.production.mtls_proxy import Authority

UP = ("4: ACTIVE", "5: LinkUp")
DOWN = ("1: DOWN", "2: Polling")
T0 = 1_800_000_000.0
SETTLED = T0 - 10_000  # booted long ago: no grace left
MOUNTS = (
    "sysfs /sys sysfs rw,nosuid,nodev,noexec,relatime 0 0\n"
    "proc /proc proc rw,nosuid,nodev,noexec,relatime 0 0\n"
    "/dev/nvme0n1p2 / ext4 rw,relatime 0 0\n"
    "/dev/md0 /raid ext4 {raid},relatime,stripe=256 0 0\n"
)


def port(root: Path, device: str, n: int, state: tuple[str, str], layer: str = "InfiniBand", **counters: int) -> None:
    d = root / "class" / "infiniband" / device / "ports" / str(n)
    (d / "counters").mkdir(parents=True, exist_ok=True)
    (d / "state").write_text(state[0] + "\n")
    (d / "phys_state").write_text(state[1] + "\n")
    (d / "link_layer").write_text(layer + "\n")
    for name in ("link_downed", "link_error_recovery", "symbol_error", "port_rcv_errors"):
        (d / "counters" / name).write_text(f"{counters.get(name, 0)}\n")


def stat_line(pid: int, comm: str, state: str, start: int = 4242) -> str:
    # pid (comm) state ppid pgrp session tty_nr tpgid flags minflt cminflt majflt cmajflt utime
    # stime cutime cstime priority nice num_threads itrealvalue starttime ...
    return f"{pid} ({comm}) {state} 1 {pid} {pid} 0 -1 4194560 10 0 0 0 0 0 0 0 20 0 1 0 {start} 0 0\n"


def watch(tmp_path: Path, **kw) -> NodeWatch:
    return NodeWatch(
        tmp_path / "sys",
        tmp_path / "proc",
        kw.pop("ib_port_count", 0),
        WatchLimits(**kw),
        Debounce(Confirmation(samples=2, grace_s=120)),
    )


@pytest.fixture
def roots(tmp_path: Path) -> Path:
    (tmp_path / "proc").mkdir()
    (tmp_path / "proc" / "mounts").write_text(MOUNTS.format(raid="rw"))
    for i in range(2):
        port(tmp_path / "sys", f"mlx5_{i}", 1, UP)
    port(tmp_path / "sys", "mlx5_bond_0", 1, UP, layer="Ethernet")
    return tmp_path


def signatures_of(found) -> list[tuple[str, str]]:
    return [(f.signature, f.severity) for f in found]


def test_the_ports_read_as_the_kernel_writes_them(roots: Path) -> None:
    ports = read_ports(roots / "sys")
    assert ports is not None and set(ports) == {"mlx5_0 port 1", "mlx5_1 port 1", "mlx5_bond_0 port 1"}
    assert ports["mlx5_0 port 1"].up and ports["mlx5_bond_0 port 1"].link_layer == "Ethernet"
    assert read_ports(roots / "nowhere") is None


def test_a_port_down_for_one_sample_is_nothing_and_down_for_two_is_critical(roots: Path) -> None:
    w = watch(roots)
    assert w.observe(now=T0, settled_at=SETTLED) == []
    port(roots / "sys", "mlx5_1", 1, DOWN, link_downed=1)
    assert w.observe(now=T0 + 30, settled_at=SETTLED) == []  # one sample: not yet believed
    assert w.unconfirmed
    port(roots / "sys", "mlx5_1", 1, UP, link_downed=1)
    assert w.observe(now=T0 + 60, settled_at=SETTLED) == []  # back up: it never was an event
    port(roots / "sys", "mlx5_1", 1, DOWN, link_downed=2)
    assert w.observe(now=T0 + 90, settled_at=SETTLED) == []
    found = w.observe(now=T0 + 120, settled_at=SETTLED)
    assert signatures_of(found) == [("ib_port_down", "critical")]
    assert "mlx5_1 port 1" in found[0].message and "state DOWN, physical state Polling" in found[0].message
    assert w.observe(now=T0 + 150, settled_at=SETTLED) == []  # reported once in this appearance


def test_a_port_that_keeps_coming_back_is_flapping(roots: Path) -> None:
    """Three downs in the window, two seen by the sample and one only by link_downed (the
    port was down and up again between samples): a flap, confirmed by the next sample."""
    w = watch(roots, flap_window_s=600, flaps=3)
    w.observe(now=T0, settled_at=SETTLED)
    steps = [(DOWN, 1), (UP, 1), (DOWN, 2), (UP, 3)]  # the last: down and up between samples
    for i, (state, downed) in enumerate(steps, 1):
        port(roots / "sys", "mlx5_0", 1, state, link_downed=downed)
        assert w.observe(now=T0 + 10 * i, settled_at=SETTLED) == []
    found = w.observe(now=T0 + 50, settled_at=SETTLED)
    assert signatures_of(found) == [("ib_port_flapping", "critical")]
    assert found[0].message.endswith("mlx5_0 port 1: down 3 times in 600 s")


def test_downs_older_than_the_window_are_no_flap(roots: Path) -> None:
    w = watch(roots, flap_window_s=60, flaps=3)
    w.observe(now=T0, settled_at=SETTLED)
    for i in range(1, 7):
        port(roots / "sys", "mlx5_0", 1, UP, link_downed=i)  # one down every 40 s
        assert w.observe(now=T0 + 40 * i, settled_at=SETTLED) == []


def test_no_critical_finding_within_the_grace_after_boot(roots: Path) -> None:
    w = watch(roots, ib_port_count=3)
    assert w.observe(now=T0, settled_at=T0 - 10) == [] and w.observe(now=T0 + 30, settled_at=T0 - 10) == []
    found = w.observe(now=T0 + 120, settled_at=T0 - 10)
    assert signatures_of(found) == [("ib_device_missing", "critical")]
    assert "2 InfiniBand ports, the profile has 3" in found[0].message  # the Ethernet port is no rail


def test_no_infiniband_class_at_all_is_a_device_missing(tmp_path: Path) -> None:
    (tmp_path / "proc").mkdir()
    w = watch(tmp_path, ib_port_count=8)
    w.observe(now=T0, settled_at=SETTLED)
    found = w.observe(now=T0 + 30, settled_at=SETTLED)
    assert signatures_of(found) == [("ib_device_missing", "critical")]
    assert "no /sys/class/infiniband, the profile has 8" in found[0].message


def test_link_errors_faster_than_the_limit_are_a_warning_at_first_sight(roots: Path) -> None:
    w = watch(roots, errors_per_hour=600)
    w.observe(now=T0, settled_at=SETTLED)
    port(roots / "sys", "mlx5_0", 1, UP, symbol_error=5)  # 5 in 60 s: 300 an hour, under the limit
    assert w.observe(now=T0 + 60, settled_at=SETTLED) == []
    port(roots / "sys", "mlx5_0", 1, UP, symbol_error=40, port_rcv_errors=10)  # 50 in 120 s: 1500 an hour
    found = w.observe(now=T0 + 120, settled_at=SETTLED)
    assert signatures_of(found) == [("ib_link_errors_rising", "warning")]
    assert "1500 link errors an hour (limit 600)" in found[0].message
    port(roots / "sys", "mlx5_0", 1, UP)  # cleared (perfquery -R): a new window, no negative rate
    w.observe(now=T0 + 180, settled_at=SETTLED)
    assert w.errors["mlx5_0 port 1"] == type(w.errors["mlx5_0 port 1"])([(T0 + 180, 0)])


def test_a_data_mount_turned_read_only_is_critical_one_read_only_from_the_start_is_not(roots: Path) -> None:
    w = watch(roots)
    mounts = roots / "proc" / "mounts"
    w.observe(now=T0, settled_at=SETTLED)
    mounts.write_text(MOUNTS.format(raid="ro"))
    assert w.observe(now=T0 + 30, settled_at=SETTLED) == []
    found = w.observe(now=T0 + 60, settled_at=SETTLED)
    assert signatures_of(found) == [("fs_read_only_mount", "critical")]
    assert "/raid: ext4 /dev/md0 is now mounted read-only" in found[0].message
    fresh = watch(roots)  # an agent started after the remount: nothing to compare with
    assert fresh.observe(now=T0, settled_at=SETTLED) == [] and fresh.observe(now=T0 + 30, settled_at=SETTLED) == []


def test_processes_in_d_state_past_the_hung_task_timeout_are_a_warning(roots: Path) -> None:
    proc = roots / "proc"
    for pid, comm, state in ((101, "python3", "D"), (102, "kworker/u16:9", "S"), (103, "cp (x) y", "D")):
        (proc / str(pid)).mkdir()
        (proc / str(pid) / "stat").write_text(stat_line(pid, comm, state))
    assert read_stuck_candidates(proc) == {(101, "python3", 4242), (103, "cp (x) y", 4242)}
    w = watch(roots, stuck_s=120)
    assert w.observe(now=T0, settled_at=SETTLED) == []
    (proc / "101" / "stat").write_text(stat_line(101, "python3", "R"))  # 101 finished its I/O
    assert w.observe(now=T0 + 119, settled_at=SETTLED) == []
    found = w.observe(now=T0 + 120, settled_at=SETTLED)
    assert signatures_of(found) == [("d_state_processes", "warning")]
    assert "1 in D state for 120 s or more: cp (x) y[103]" in found[0].message
    (proc / "103" / "stat").write_text(stat_line(103, "cp (x) y", "D", start=9999))  # the pid reused
    assert w.observe(now=T0 + 150, settled_at=SETTLED) == []


# ---- end to end: the agent, its intake transport, the real intake ---------------------------

NFS_LOG = Path(__file__).parent.parent / "fixtures" / "checks" / "xid" / "dmesg_nfs_hang_readonly_fail.txt"
SAMPLE_S = 0.05


async def test_a_flapping_port_and_an_nfs_hang_reach_the_intake_as_the_agents(make_intake, hashes, tmp_path) -> None:
    """`fleetctl agent --events-to-intake` with the node watch: a port of a real-format sysfs
    tree that goes down and comes back three times, and the kernel's NFS and read-only lines
    in its log, arrive at the intake over https as node n1's agent's events, each with its
    catalog signature and severity."""
    secret = new_credential()
    hashes.write_text(f"n1 {token_hash(secret)}\n")
    ca = Authority(tmp_path, "intake-ca")
    intake = make_intake(tls=tls_context(*ca.server("intake")))
    log = tmp_path / "kern.log"
    log.write_text("".join(line for line in NFS_LOG.read_text().splitlines(keepends=True)[1:]))
    (tmp_path / "proc").mkdir()
    (tmp_path / "proc" / "mounts").write_text(MOUNTS.format(raid="rw"))
    port(tmp_path / "sys", "mlx5_0", 1, UP)
    agent = Agent(
        AgentConfig(
            node="n1",
            spool_dir=tmp_path / "agent",
            sample_interval_s=SAMPLE_S,
            confirmation=Confirmation(samples=2, grace_s=0),
            watch_root=tmp_path,
            watch_limits=WatchLimits(flap_window_s=600, flaps=3),
        ),
        FileSource(log),
        IntakeTransport(f"https://127.0.0.1:{intake.port}", secret, str(ca.cert_path)),
    )
    assert agent.watch is not None
    stop = asyncio.Event()
    task = asyncio.create_task(agent.run_until(stop))
    # Each step waits until the watch has read it: a few sample intervals, bounded generously
    # for a loaded machine (a sample is a handful of file reads).
    step_s = max(10.0, 200 * SAMPLE_S)

    async def seen(up: bool) -> None:
        deadline = time.monotonic() + step_s
        while (p := agent.watch.last.get("mlx5_0 port 1")) is None or p.up is not up:
            assert time.monotonic() < deadline, f"the watch never read the port {'up' if up else 'down'}"
            await asyncio.sleep(SAMPLE_S / 2)

    try:
        await seen(True)
        for downed in range(1, 4):
            port(tmp_path / "sys", "mlx5_0", 1, DOWN, link_downed=downed)
            await seen(False)
            port(tmp_path / "sys", "mlx5_0", 1, UP, link_downed=downed)
            await seen(True)
        deadline = time.monotonic() + 30  # the flap's confirming sample, then one delivery
        while not any(e.get("signature") == "ib_port_flapping" for e in intake.spool.pending(100)):
            assert time.monotonic() < deadline, [e.get("signature") for e in intake.spool.pending(100)]
            await asyncio.sleep(0.05)
    finally:
        stop.set()
        await task
    got = {e["signature"]: e for e in intake.spool.pending(100)}
    assert {k: (v["node"], v["source"], v["severity"]) for k, v in got.items()} == {
        "ib_port_flapping": ("n1", "agent", "critical"),
        "nfs_server_not_responding": ("n1", "agent", "warning"),
        "hung_task": ("n1", "agent", "warning"),
        "fs_remounted_read_only": ("n1", "agent", "critical"),
    }
    assert "mlx5_0 port 1: down 3 times in 600 s" in got["ib_port_flapping"]["message"]
    assert "nfs: server hermine.idb.hist.no not responding" in got["nfs_server_not_responding"]["message"]
    assert got["ib_port_flapping"]["code"] is None


@pytest.mark.parametrize(
    ("setting", "value", "words"),
    [
        ("FLEETCTL_AGENT_WATCH_FLAPS", "1", "agent_watch_flaps: '1' is out of range"),
        ("FLEETCTL_AGENT_WATCH_FLAP_WINDOW_S", "5", "agent_watch_flap_window_s: '5' is out of range"),
        ("FLEETCTL_AGENT_WATCH_STUCK_S", "soon", "agent_watch_stuck_s"),
    ],
)
def test_a_bad_watch_setting_is_one_line_and_exit_2(tmp_path: Path, setting: str, value: str, words: str) -> None:
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "fleetctl.cli.main",
            "agent",
            "n1",
            "--spool",
            str(tmp_path / "s"),
            "--metrics-port",
            "0",
        ],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "FLEETCTL_CONFIG": os.devnull, setting: value},
    )
    assert proc.returncode == 2 and words in proc.stderr and len(proc.stderr.strip().splitlines()) == 1, proc.stderr
