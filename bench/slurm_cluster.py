"""A real multi-node Slurm cluster on one machine, for tests and benchmarks.

One munged, one slurmctld and one `slurmd -N nodeN` per node, all from Debian's slurm-wlm
and munge, with every file (config, state, spool, logs, pids, munge key and socket) under
one directory, so it runs beside a system Slurm or munge without touching them. Every
command reaches it through `SLURM_CONF`, which `SlurmCluster.runner()` sets.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from fleetctl.schedulers.slurm import LocalCommandRunner, SlurmScheduler, expand_hostlist

REQUIRED_PROGRAMS = ("munged", "slurmctld", "slurmd", "scontrol", "sinfo", "squeue", "sbatch", "scancel")
STARTUP_TIMEOUT_S = 60.0
STOP_TIMEOUT_S = 10.0


def slurm_unavailable_reason() -> str | None:
    """Why a real Slurm cluster cannot run here, or None when it can."""
    missing = [program for program in REQUIRED_PROGRAMS if shutil.which(program) is None]
    if missing:
        return f"needs Debian's slurm-wlm and munge (missing: {', '.join(missing)})"
    if os.geteuid() != 0:
        return "needs root: slurmd must run as root to start jobs as the users who submitted them"
    return None


def _free_ports(count: int) -> list[int]:
    # Hold every socket open until all are bound, so the ports are distinct.
    sockets = [socket.socket(socket.AF_INET, socket.SOCK_STREAM) for _ in range(count)]
    try:
        for sock in sockets:
            sock.bind(("127.0.0.1", 0))
        return [sock.getsockname()[1] for sock in sockets]
    finally:
        for sock in sockets:
            sock.close()


def _slurm_conf(
    root: Path, munge_socket: Path, controller_port: int, node_ports: list[int], cred_expire_s: int | None
) -> str:
    node_names = [f"node{index}" for index in range(1, len(node_ports) + 1)]
    node_lines = [
        # CPUs=1: every node takes one job at a time, whatever the machine has.
        f"NodeName={name} NodeHostname=localhost NodeAddr=127.0.0.1 Port={port} CPUs=1 RealMemory=100 State=UNKNOWN"
        for name, port in zip(node_names, node_ports, strict=False)
    ]
    return "\n".join(
        [
            "ClusterName=fleetctl-test",
            "SlurmctldHost=localhost(127.0.0.1)",
            f"SlurmctldPort={controller_port}",
            "SlurmUser=root",
            "SlurmdUser=root",
            "AuthType=auth/munge",
            "CredType=cred/munge",
            # cred_expire also sets how long Slurm holds a requeued job back (default 120 s).
            f"AuthInfo=socket={munge_socket}" + (f",cred_expire={cred_expire_s}" if cred_expire_s else ""),
            f"StateSaveLocation={root}/state",
            f"SlurmdSpoolDir={root}/spool/%n",
            f"SlurmctldPidFile={root}/run/slurmctld.pid",
            f"SlurmdPidFile={root}/run/slurmd-%n.pid",
            f"SlurmctldLogFile={root}/log/slurmctld.log",
            f"SlurmdLogFile={root}/log/slurmd-%n.log",
            f"TmpFS={root}/tmp",
            "ProctrackType=proctrack/linuxproc",
            "TaskPlugin=task/none",
            "JobAcctGatherType=jobacct_gather/none",
            "AccountingStorageType=accounting_storage/none",
            "JobCompType=jobcomp/none",
            "MpiDefault=none",
            "SwitchType=switch/none",
            "SelectType=select/cons_tres",
            "SelectTypeParameters=CR_CPU",
            "ReturnToService=2",
            "JobRequeue=1",
            # Short timeouts so a dead daemon shows quickly and tests do not wait on it.
            "SlurmdTimeout=10",
            "MessageTimeout=5",
            "KillWait=2",
            "InactiveLimit=0",
            # The builtin FIFO scheduler runs at every submit, job end and update, and the
            # main loop every second, so a freed node is used at once.
            "SchedulerType=sched/builtin",
            "SchedulerParameters=sched_interval=1",
            *node_lines,
            f"PartitionName=main Nodes={','.join(node_names)} Default=YES MaxTime=INFINITE State=UP",
            "",
        ]
    )


@dataclass(frozen=True)
class JobRun:
    nodes: tuple[str, ...]
    # Why Slurm kept the job pending before this run started ("BeginTime": its requeue hold).
    pending_reasons: set[str]


@dataclass
class SlurmCluster:
    root: Path
    conf_path: Path
    node_names: tuple[str, ...]
    # Also how long Slurm holds a requeued job back; None is Slurm's default, 120 s.
    cred_expire_s: int | None = None
    processes: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)
    # slurmctld's command line, kept by stop_controller() for start_controller().
    _controller_argv: list[str] = field(default_factory=list, repr=False)

    def runner(self) -> LocalCommandRunner:
        return LocalCommandRunner(env={"SLURM_CONF": str(self.conf_path)})

    def scheduler(self) -> SlurmScheduler:
        return SlurmScheduler(run=self.runner())

    def run(self, *argv: str, timeout_s: float = 30.0) -> str:
        """Run a Slurm command against this cluster; its stdout, or RuntimeError with stderr."""
        exit_status, stdout, stderr = self.runner()(list(argv), timeout_s)
        if exit_status != 0:
            raise RuntimeError(f"{' '.join(argv)} exited {exit_status}: {stderr.strip()}")
        return stdout

    def sbatch(self, *options: str) -> str:
        """Submit a batch job; its job id."""
        return self.run(
            "sbatch", "--parsable", f"--chdir={self.root}/jobs", f"--output={self.root}/jobs/%j.out", *options
        ).strip()

    def submit_sleep_job(self, *options: str) -> str:
        """Submit `sleep 300` that first logs each run's number and nodes; its job id."""
        return self.sbatch(
            # Appended, so every run of a requeued job leaves its line.
            "--open-mode=append",
            *options,
            "--wrap",
            'echo "run ${SLURM_RESTART_COUNT:-0} on $SLURM_JOB_NODELIST"; exec sleep 300',
        )

    def wait_for_run(self, job_id: str, run: int, timeout_s: float = 30.0) -> JobRun:
        """Wait until run number `run` (0 first, +1 per requeue) of a sleep job has started."""
        output = self.root / "jobs" / f"{job_id}.out"
        prefix = f"run {run} on "
        deadline = time.monotonic() + timeout_s
        pending_reasons: set[str] = set()
        while time.monotonic() < deadline:
            for line in output.read_text().splitlines() if output.exists() else []:
                if line.startswith(prefix):
                    return JobRun(nodes=expand_hostlist(line.removeprefix(prefix)), pending_reasons=pending_reasons)
            squeue = self.run("squeue", "-h", f"--jobs={job_id}", "--states=all", "-o", "%T|%r")
            state, reason = squeue.strip().split("|")
            if state == "PENDING":
                pending_reasons.add(reason)
            elif state not in ("RUNNING", "CONFIGURING", "COMPLETING"):
                raise RuntimeError(f"job {job_id} is {state} ({reason}) before run {run} started\n{self.log_tail()}")
            time.sleep(0.02)
        raise RuntimeError(f"run {run} of job {job_id} not started after {timeout_s:.0f}s; pending: {pending_reasons}")

    def wait_for_nodes_idle(self, timeout_s: float = STARTUP_TIMEOUT_S) -> None:
        self._wait_for_node_states("%T", lambda states: set(states) == {"idle"}, "idle", timeout_s)

    def reset(self) -> None:
        """Cancel every job and resume every node, so one test does not leak into the next."""
        self.run("scancel", "--full", "--user=root")
        deadline = time.monotonic() + STARTUP_TIMEOUT_S
        while self.run("squeue", "-h", "-o", "%i").strip():
            if time.monotonic() > deadline:
                raise RuntimeError(f"jobs still queued after scancel:\n{self.run('squeue')}")
            time.sleep(0.1)
        # Slurm refuses to resume a node whose slurmd has not registered yet (just after
        # start_controller(): state unknown) with "Invalid node state specified".
        self._wait_for_nodes_registered()
        scheduler = self.scheduler()
        for node in self.node_names:
            scheduler.resume(node, force=True)
        self.wait_for_nodes_idle()

    def _wait_for_nodes_registered(self, timeout_s: float = STARTUP_TIMEOUT_S) -> None:
        # 'unk': not registered since slurmctld started; '*': not responding.
        self._wait_for_node_states(
            "%t",
            lambda states: not any(s.startswith("unk") or s.endswith("*") for s in states),
            "registered",
            timeout_s,
        )

    def _wait_for_node_states(self, state_format: str, ready, what: str, timeout_s: float) -> None:
        """Poll sinfo until every node is listed and ready(their states) holds."""
        deadline = time.monotonic() + timeout_s
        states: dict[str, str] = {}
        while time.monotonic() < deadline:
            self._raise_if_a_daemon_died()
            exit_status, stdout, _ = self.runner()(["sinfo", "-h", "-N", "-o", f"%N|{state_format}"], 10.0)
            if exit_status == 0:
                states = dict(line.split("|", 1) for line in stdout.splitlines())
                if sorted(states) == sorted(self.node_names) and ready(states.values()):
                    return
            time.sleep(0.2)
        raise RuntimeError(f"Slurm nodes not {what} after {timeout_s:.0f}s: {states}\n{self.log_tail()}")

    def stop_controller(self) -> None:
        """Stop slurmctld, as an outage does: every Slurm command fails until start_controller().

        SIGTERM, as a stopped or restarted controller gets: it saves its state (jobs, node
        drains) on the way out, and the slurmds and running jobs carry on without it.
        """
        process = self.processes.pop("slurmctld")
        self._controller_argv = list(process.args)
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGTERM)
            try:
                process.wait(STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait()

    def start_controller(self, timeout_s: float = STARTUP_TIMEOUT_S) -> None:
        """Start slurmctld again with the same argv on the same state directory (its saved jobs
        and node drains come back); returns once `scontrol ping` and sinfo answer. Does nothing
        while it runs.

        The nodes show as `unknown` for a few seconds more, until their slurmds register
        again, as after a real controller restart (reset() waits for that).
        """
        if "slurmctld" in self.processes:
            return
        # Before the slurmds, as start_slurm_cluster started them: stop() ends them in reverse.
        nodes = {name: self.processes.pop(name) for name in list(self.processes) if name.startswith("slurmd-")}
        _start(self, "slurmctld", self._controller_argv)
        self.processes.update(nodes)
        deadline = time.monotonic() + timeout_s
        while True:
            self._raise_if_a_daemon_died()
            exit_status, stdout, _ = self.runner()(["scontrol", "ping"], 10.0)
            if exit_status == 0 and "is UP" in stdout:
                exit_status, stdout, _ = self.runner()(["sinfo", "-h", "-N", "-o", "%N"], 10.0)
                if exit_status == 0 and sorted(stdout.split()) == sorted(self.node_names):
                    return
            if time.monotonic() > deadline:
                raise RuntimeError(f"slurmctld not answering {timeout_s:.0f}s after its start\n{self.log_tail()}")
            time.sleep(0.2)

    @contextmanager
    def topology(self, conf: str) -> Iterator[None]:
        """Within: slurmctld runs with TopologyPlugin=topology/tree and `conf` as the
        topology.conf beside slurm.conf (where Slurm looks for it). The controller restarts
        on the way in and out, so the cluster is as it was afterwards; a topology slurmctld
        refuses raises RuntimeError with its log."""
        original = self.conf_path.read_text()
        topology_path = self.conf_path.with_name("topology.conf")
        self.stop_controller()
        try:
            topology_path.write_text(conf)
            self.conf_path.write_text(original + "TopologyPlugin=topology/tree\n")
            self.start_controller()
            yield
        finally:
            if "slurmctld" in self.processes:
                self.stop_controller()
            self.conf_path.write_text(original)
            topology_path.unlink(missing_ok=True)
            self.start_controller()

    def log_tail(self, lines: int = 20) -> str:
        tails = []
        for log in sorted((self.root / "log").glob("*.log")):
            text = log.read_text(errors="replace").splitlines()[-lines:]
            tails.append(f"--- {log.name}\n" + "\n".join(text))
        return "\n".join(tails)

    def _raise_if_a_daemon_died(self) -> None:
        for name, process in self.processes.items():
            if process.poll() is not None:
                raise RuntimeError(f"{name} exited with {process.returncode}\n{self.log_tail()}")

    def stop(self) -> None:
        """Stop every daemon and every job process; leaves no process behind."""
        # Nodes first, then the controller, then munge that both authenticate with.
        for name in reversed(list(self.processes)):
            process = self.processes[name]
            if process.poll() is None:
                os.killpg(process.pid, signal.SIGTERM)
                try:
                    process.wait(STOP_TIMEOUT_S)
                except subprocess.TimeoutExpired:
                    os.killpg(process.pid, signal.SIGKILL)
                    process.wait()
        self.processes.clear()
        # slurmstepd and the jobs' processes run in sessions of their own, out of the
        # slurmd process groups; they are the processes whose environment names this
        # cluster's config, which sbatch and slurmd pass on.
        marker = f"\0SLURM_CONF={self.conf_path}\0".encode()
        for proc in Path("/proc").iterdir():
            try:
                if proc.name.isdigit() and marker in b"\0" + (proc / "environ").read_bytes():
                    os.kill(int(proc.name), signal.SIGKILL)
            except (FileNotFoundError, ProcessLookupError, PermissionError):
                pass  # ended meanwhile, or a kernel thread


def _start(cluster: SlurmCluster, name: str, argv: list[str]) -> None:
    # Appended: a daemon started again (start_controller) keeps its first run's output.
    log = open(cluster.root / "log" / f"{name}.stdout", "ab")
    with log:
        # Own session and process group: stop() kills the whole group and nothing else.
        cluster.processes[name] = subprocess.Popen(
            argv,
            env={**os.environ, "SLURM_CONF": str(cluster.conf_path)},
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )


def _wait_for_path(path: Path, cluster: SlurmCluster, timeout_s: float = 10.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not path.exists():
        cluster._raise_if_a_daemon_died()
        if time.monotonic() > deadline:
            raise RuntimeError(f"{path} did not appear within {timeout_s:.0f}s\n{cluster.log_tail()}")
        time.sleep(0.05)


def start_slurm_cluster(tmpdir: Path, nodes: int = 4, cred_expire_s: int | None = None) -> SlurmCluster:
    """Start munged, slurmctld and `nodes` slurmds under tmpdir; returns once all nodes are idle.

    cred_expire_s: Slurm's credential lifetime, which is also how long it holds a requeued
    job before starting it again; None keeps Slurm's default (120 s).

    The caller must call `.stop()`; on a failed start this stops what it started and raises
    RuntimeError with the daemons' log tails.
    """
    reason = slurm_unavailable_reason()
    if reason:
        raise RuntimeError(reason)
    root = Path(tmpdir)
    for directory in ("state", "spool", "run", "log", "tmp", "jobs", "munge"):
        (root / directory).mkdir(parents=True, exist_ok=True)
    node_names = tuple(f"node{index}" for index in range(1, nodes + 1))
    for node in node_names:
        (root / "spool" / node).mkdir(exist_ok=True)
    munge_dir = root / "munge"
    munge_socket = munge_dir / "socket"
    key_file = munge_dir / "munge.key"
    key_file.write_bytes(os.urandom(1024))
    key_file.chmod(0o400)
    controller_port, *node_ports = _free_ports(nodes + 1)
    conf_path = root / "slurm.conf"
    conf_path.write_text(_slurm_conf(root, munge_socket, controller_port, node_ports, cred_expire_s))

    cluster = SlurmCluster(root=root, conf_path=conf_path, node_names=node_names, cred_expire_s=cred_expire_s)
    try:
        # --force: munged refuses root otherwise; it owns only files under munge_dir.
        _start(
            cluster,
            "munged",
            [
                "munged", "--foreground", "--force",
                f"--key-file={key_file}", f"--socket={munge_socket}",
                f"--pid-file={munge_dir}/munged.pid", f"--log-file={root}/log/munged.log",
                f"--seed-file={munge_dir}/munged.seed",
            ],
        )  # fmt: skip
        _wait_for_path(munge_socket, cluster)
        # Recovers the jobs and node drains saved in state/ (start_controller relies on it);
        # -i: starts anyway when a state file cannot be read, dropping what it held.
        _start(cluster, "slurmctld", ["slurmctld", "-D", "-i"])
        for node in node_names:
            _start(cluster, f"slurmd-{node}", ["slurmd", "-D", "-N", node])
        cluster.wait_for_nodes_idle()
    except BaseException:
        cluster.stop()
        raise
    return cluster


@dataclass(frozen=True)
class RestartMeasurement:
    job_id: str
    with_release: bool
    bad_node: str
    first_nodes: tuple[str, ...]
    restarted_nodes: tuple[str, ...]
    # From draining the bad node to the job's batch script running again (monotonic clock).
    seconds: float
    # Whether the requeued job waited with reason BeginTime (Slurm's requeue hold).
    held_for_begin_time: bool


def measure_restart(cluster: SlurmCluster, with_release: bool, timeout_s: float = 300.0) -> RestartMeasurement:
    """Time a 2-node job's restart after one of its nodes fails: drain to the job running again.

    Submits a 2-node sleep job, drains its first node as fleetctl would on an XID 79, then
    restarts the job either fleetctl's way (with_release: requeue, exclude the bad node,
    release at once) or the plain Slurm way (`scontrol requeue`, and Slurm starts it when
    its hold ends). Leaves the cluster idle, with every node resumed.
    """
    scheduler = cluster.scheduler()
    job_id = cluster.submit_sleep_job("--nodes=2", "--job-name=measure-restart")
    try:
        first_nodes = cluster.wait_for_run(job_id, run=0, timeout_s=timeout_s).nodes
        bad_node = first_nodes[0]
        started = time.monotonic()
        scheduler.drain(bad_node, "XID 79: GPU has fallen off the bus")
        if with_release:
            scheduler.restart_job(job_id, exclude_nodes=[bad_node])
        else:
            cluster.run("scontrol", "requeue", job_id)
        second_run = cluster.wait_for_run(job_id, run=1, timeout_s=timeout_s)
        seconds = time.monotonic() - started
    finally:
        cluster.reset()
    return RestartMeasurement(
        job_id=job_id,
        with_release=with_release,
        bad_node=bad_node,
        first_nodes=first_nodes,
        restarted_nodes=second_run.nodes,
        seconds=seconds,
        held_for_begin_time="BeginTime" in second_run.pending_reasons,
    )
