"""Slurm adapter: drain, resume, node state, jobs and job restart through scontrol/sinfo/squeue.

Commands run through a `CommandRunner`, locally by default, or on a login node over SSH
when one is wired in. Output is read in delimited `-o`/`-O` formats rather than `--json`:
up to Slurm 22.05, `squeue --json` ignores every filter and dumps the whole queue.
"""

from __future__ import annotations

import math
import os
import re
import subprocess
import time
from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any, Protocol

from fleetctl.schedulers.base import (
    REASON_PREFIX,
    FleetctlDoesNotOwnDrain,
    JobHistory,
    SchedulerError,
    SchedulerJob,
    SchedulerNodeState,
)
from fleetctl.text import MAX_TEXT, bounded, one_line

DEFAULT_TIMEOUT_S = 30.0
# Fields are joined with a character Slurm never puts in node names, states or job ids;
# free text (reasons, job names) always comes last and is split off with maxsplit.
FIELD_SEPARATOR = "|"
# How often restart_job looks whether a requeued job has finished completing.
SETTLE_POLL_S = 0.05
# How far slurmctld's clock may run ahead of the clock where the commands run.
CLOCK_SKEW_ALLOWANCE_S = 0.2

# Slurm node names: letters, digits, '-', '_', '.'; never a leading '-' that argv would
# read as an option, nor '=', ',' or brackets that scontrol would read as syntax.
_NODE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")
# A job, an array task (123_4) or a heterogeneous job component (123+1).
_JOB_ID = re.compile(r"[0-9]{1,12}(?:_[0-9]{1,12}|\+[0-9]{1,4})?")
# Every job slurmctld remembers (MinJobAge after its end), with times as Unix seconds
# (SLURM_TIME_FORMAT=%s): no time zone to guess on the host the command runs on.
JOB_HISTORY_ARGV = [
    "env",
    "SLURM_TIME_FORMAT=%s",
    "squeue",
    "--noheader",
    "--states=all",
    "--Format=JobID:|,State:|,SubmitTime:|,StartTime:|,EndTime:|,RestartCnt:|,NumNodes:|,tres-alloc:|,NodeList:|,Name:",
]
# The reservation that holds an island's hot spares (fleetctl.jobs.spares) is this plus the island.
SPARE_RESERVATION_PREFIX = "fleetctl-spares-"
# States in which a job has not yet run or is running; in every other one it has ended.
_NOT_ENDED = frozenset(
    {
        "pending",
        "running",
        "configuring",
        "completing",
        "suspended",
        "requeued",
        "requeue_hold",
        "requeue_fed",
        "resizing",
        "signaling",
        "stage_out",
        "stopped",
        "resv_del_hold",
    }
)
_GPUS = re.compile(r"(?:^|,)gres/gpu=([0-9]{1,6})(?:,|$)")
_HOSTLIST_PART = re.compile(r"([^\[\],]*)\[([0-9,\-]+)\]([^\[\],]*)|([^\[\],]+)")


class CommandRunner(Protocol):
    """Runs argv (no shell) and returns (exit_status, stdout, stderr).

    Raises TimeoutError when the command runs past timeout_s, and OSError when it cannot
    be started; SlurmScheduler turns both into SchedulerError.
    """

    def __call__(self, argv: list[str], timeout_s: float) -> tuple[int, str, str]: ...


class LocalCommandRunner:
    """Runs commands on this machine; env is added to this process's environment."""

    def __init__(self, env: Mapping[str, str] | None = None) -> None:
        self.env = dict(env or {})

    def __call__(self, argv: list[str], timeout_s: float) -> tuple[int, str, str]:
        try:
            completed = subprocess.run(
                argv,
                env={**os.environ, **self.env},
                stdin=subprocess.DEVNULL,
                capture_output=True,
                text=True,
                timeout=timeout_s,
            )
        except subprocess.TimeoutExpired as exc:
            raise TimeoutError(f"timed out after {timeout_s:g}s") from exc
        return completed.returncode, completed.stdout, completed.stderr


class RemoteExecutor(Protocol):
    """fleetctl's SSH executor as this module uses it (fleetctl.executors.ssh.SshExecutor;
    the schedulers layer does not import the executors layer)."""

    def run(self, target: Any, argv: Sequence[str], timeout_s: float) -> Any: ...


class SshCommandRunner:
    """Runs Slurm's commands on a login or controller host over the SSH executor, for a
    worker that is not a Slurm host itself: host keys are checked against known_hosts as for
    any node, argv is quoted, and the executor's in-flight limit covers these commands too.
    slurm_conf is the slurm.conf path on that host (empty: Slurm's default there)."""

    def __init__(self, executor: RemoteExecutor, target: Any, slurm_conf: str = "") -> None:
        self.executor, self.target, self.slurm_conf = executor, target, slurm_conf

    def __call__(self, argv: list[str], timeout_s: float) -> tuple[int, str, str]:
        if self.slurm_conf:
            argv = ["env", f"SLURM_CONF={self.slurm_conf}", *argv]
        try:
            result = self.executor.run(self.target, argv, timeout_s)
        except Exception as exc:
            kind = getattr(exc, "kind", None)
            if kind is None:
                raise
            if kind == "timeout":
                raise TimeoutError(f"timed out after {timeout_s:g}s on {self.target.address}") from None
            raise OSError(f"on Slurm host {self.target.address}: {kind}: {exc}") from None
        return result.exit_status, result.stdout, result.stderr


def validate_node_name(node: str) -> str:
    if not _NODE_NAME.fullmatch(node):
        raise SchedulerError(f"invalid Slurm node name {node!r}")
    return node


def validate_job_id(job_id: str) -> str:
    if not _JOB_ID.fullmatch(job_id):
        raise SchedulerError(f"invalid Slurm job id {job_id!r}")
    return job_id


def expand_hostlist(hostlist: str) -> tuple[str, ...]:
    """'node[1-3,7],gpu01' -> ('node1', 'node2', 'node3', 'node7', 'gpu01'), keeping zero padding."""
    names: list[str] = []
    position = 0
    while position < len(hostlist):
        match = _HOSTLIST_PART.match(hostlist, position)
        if match is None or match.end() == position:
            raise SchedulerError(f"cannot read Slurm host list {hostlist!r}")
        prefix, ranges, suffix, plain = match.groups()
        if plain is not None:
            names.append(plain)
        else:
            for item in ranges.split(","):
                first, _, last = item.partition("-")
                if not first or (last and int(last) < int(first)):
                    raise SchedulerError(f"cannot read Slurm host list {hostlist!r}")
                for number in range(int(first), int(last or first) + 1):
                    names.append(f"{prefix}{number:0{len(first)}d}{suffix}")
        position = match.end()
        if position < len(hostlist):
            if hostlist[position] != ",":
                raise SchedulerError(f"cannot read Slurm host list {hostlist!r}")
            position += 1
    return tuple(names)


def _epoch(value: str, what: str, line: str) -> datetime | None:
    """A Unix time from squeue; None for the words Slurm prints for no time."""
    value = value.strip()
    if value.upper() in ("NONE", "N/A", "UNKNOWN", "0", ""):
        return None
    if not value.isdigit() or len(value) > 12:
        raise SchedulerError(f"cannot read {what} {value!r} in squeue line {line!r}")
    return datetime.fromtimestamp(int(value), UTC)


def parse_job_history(output: str) -> list[JobHistory]:
    """The output of JOB_HISTORY_ARGV as jobs; SchedulerError on a line it cannot read."""
    jobs = []
    for line in output.splitlines():
        if not line.strip():
            continue
        parts = line.split(FIELD_SEPARATOR, 9)  # the name, last, may hold the separator
        if len(parts) != 10:
            raise SchedulerError(f"cannot read squeue line {line!r}")
        job_id, state, submit, start, end, restarts, node_count, tres, nodes, name = parts
        state = state.strip().lower()
        if not _JOB_ID.fullmatch(job_id.strip()) or not restarts.strip().isdigit() or not node_count.strip().isdigit():
            raise SchedulerError(f"cannot read squeue line {line!r}")
        count = max(1, int(node_count))
        gpus = _GPUS.search(tres.strip())
        jobs.append(
            JobHistory(
                job_id=job_id.strip(),
                name=name,
                state=state,
                nodes=expand_hostlist(nodes.strip()),
                node_count=count,
                submitted_at=_epoch(submit, "SubmitTime", line),
                # A pending job's StartTime is when Slurm expects to start it, not a start.
                started_at=None if state == "pending" else _epoch(start, "StartTime", line),
                # A running job's EndTime is its time limit, if it has one.
                ended_at=None if state in _NOT_ENDED else _epoch(end, "EndTime", line),
                restart_count=int(restarts),
                gpus_per_node=int(gpus[1]) // count if gpus else None,
            )
        )
    return jobs


def _node_state(node: str, state_flags: str, reason: str) -> SchedulerNodeState:
    """From sinfo's StateComplete ('idle+drain', 'mixed', 'down+drain+not_responding')."""
    base, *flags = state_flags.lower().split("+")
    drained = "drain" in flags
    state = base if base in ("idle", "allocated", "mixed", "down") else "unknown"
    if drained and state in ("allocated", "mixed"):
        state = "draining"
    elif drained and state == "idle":
        state = "drain"
    reason = reason.strip()
    # sinfo prints 'none' when a node has no reason.
    reason_or_none = reason if reason and reason != "none" else None
    return SchedulerNodeState(
        node=node,
        state=state,
        drained=drained,
        reason=reason_or_none,
        owned_by_fleetctl=bool(reason_or_none and reason_or_none.startswith(REASON_PREFIX)),
    )


class SlurmScheduler:
    """The Scheduler protocol over Slurm's command-line tools."""

    def __init__(
        self,
        run: CommandRunner | None = None,
        timeout_s: float = DEFAULT_TIMEOUT_S,
        clock: Callable[[], float] = time.time,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.run = run or LocalCommandRunner()
        self.timeout_s = timeout_s
        # The wall clock the credential-revoke second is judged by, and the waits: given, so
        # a test can script them without patching the time module under every thread.
        self.clock, self.sleep = clock, sleep
        # Jobs requeued by requeue() and not yet released: job id -> (when, the nodes it ran on).
        self._requeued: dict[str, tuple[float, tuple[str, ...]]] = {}

    def _command(self, argv: list[str]) -> str:
        """Run a Slurm command; its stdout, or SchedulerError with one readable line."""
        command = " ".join(argv)
        try:
            exit_status, stdout, stderr = self.run(argv, self.timeout_s)
        except TimeoutError:
            raise SchedulerError(f"{command}: timed out after {self.timeout_s:g}s") from None
        except OSError as exc:
            raise SchedulerError(f"{command}: cannot run: {exc.strerror or exc}") from None
        if exit_status != 0:
            message = "; ".join(line.strip() for line in stderr.splitlines() if line.strip())
            raise SchedulerError(f"{command}: exit status {exit_status}: {message or 'no error output'}")
        return stdout

    def drain(self, node: str, reason: str, critical: bool = False) -> None:
        """Drain node with a reason marked as fleetctl's; leaves a drain by someone else as it is.
        A critical drain is the same drain: Slurm has no "move jobs off now" (the workflow
        requeues a critical fault's jobs itself).

        Overwriting an operator's reason would make the drain fleetctl's, and fleetctl would
        later resume a node the operator took out.
        """
        current = self.node_state(node)
        if current.drained and not current.owned_by_fleetctl:
            return
        # One line (sinfo prints the reason on the node's line) and one argv word that any
        # cause fits: whitespace folded, control and format characters escaped (a NUL would
        # stop the command before it runs), cut to MAX_TEXT, so scontrol never fails on it
        # ("Argument list too long" from a 400,000-character cause was retried for ever).
        reason = one_line(bounded(reason), MAX_TEXT)
        if not reason.startswith(REASON_PREFIX):
            reason = f"{REASON_PREFIX} {reason}".rstrip()
        self._command(["scontrol", "update", f"NodeName={node}", "State=DRAIN", f"Reason={reason}"])

    def resume(self, node: str, force: bool = False) -> None:
        """Return a node fleetctl drained to service; a drain or down by anyone else needs force."""
        current = self.node_state(node)
        if not (current.drained or current.state == "down"):
            return
        if not current.owned_by_fleetctl and not force:
            raise FleetctlDoesNotOwnDrain(
                f"{node} is {current.state} with reason {current.reason!r}, not set by fleetctl; "
                "resume it with force to override"
            )
        try:
            self._command(["scontrol", "update", f"NodeName={node}", "State=RESUME"])
        except SchedulerError:
            # Between the read and the update the node may have returned to service by another
            # hand (slurmctld's own on a slurmd's registration): Slurm then refuses RESUME with
            # "Invalid node state specified", and the node is where this call would put it.
            now = self.node_state(node)
            if now.drained or now.state == "down":
                raise

    def node_state(self, node: str) -> SchedulerNodeState:
        validate_node_name(node)
        found = self._sinfo_nodes([f"--nodes={node}"]).get(node)
        if found is None:
            raise SchedulerError(f"Slurm does not know node {node}")
        return found

    def node_states(self, nodes: Sequence[str]) -> dict[str, SchedulerNodeState]:
        """One sinfo for the whole cluster (a host list of 10,000 names would outgrow a
        command line), the answer cut to `nodes`."""
        wanted = set(nodes)
        return {name: state for name, state in self._sinfo_nodes([]).items() if name in wanted}

    def _sinfo_nodes(self, filters: list[str]) -> dict[str, SchedulerNodeState]:
        # A node in several partitions is a line in each, the same state on every one.
        output = self._command(
            ["sinfo", "--noheader", "--Node", *filters, "--Format=NodeList:0|,StateComplete:0|,Reason:0"]
        )
        states: dict[str, SchedulerNodeState] = {}
        for line in output.splitlines():
            name, state_flags, reason = line.split(FIELD_SEPARATOR, 2)
            states.setdefault(name.strip(), _node_state(name.strip(), state_flags.strip(), reason))
        return states

    def _jobs(self, filters: list[str]) -> list[SchedulerJob]:
        output = self._command(["squeue", "--noheader", *filters, "--format=%i|%T|%N|%j"])
        jobs = []
        for line in output.splitlines():
            job_id, state, nodes, name = line.split(FIELD_SEPARATOR, 3)
            jobs.append(
                SchedulerJob(
                    job_id=job_id,
                    name=name,
                    state=state.lower(),
                    nodes=expand_hostlist(nodes),
                )
            )
        return jobs

    def jobs_on_node(self, node: str) -> list[SchedulerJob]:
        return self._jobs([f"--nodelist={validate_node_name(node)}"])

    def busy_nodes(self) -> set[str]:
        # COMPLETING too: its processes may still hold the GPUs.
        return {node for job in self._jobs(["--states=RUNNING,COMPLETING"]) for node in job.nodes}

    def job(self, job_id: str) -> SchedulerJob:
        # --states=all: a job that just ended is still worth reporting until Slurm forgets it.
        jobs = self._jobs([f"--jobs={validate_job_id(job_id)}", "--states=all"])
        if not jobs:
            raise SchedulerError(f"Slurm does not know job {job_id}")
        return jobs[0]

    def job_history(self) -> list[JobHistory]:
        return parse_job_history(self._command(list(JOB_HISTORY_ARGV)))

    def _job_once_settled(self, job_id: str) -> tuple[str, tuple[str, ...], tuple[str, ...], tuple[str, ...]]:
        """(state, requested nodes, excluded nodes, allocated nodes) once the job is no longer
        COMPLETING."""
        deadline = time.monotonic() + self.timeout_s
        while True:
            output = self._command(["squeue", "--noheader", f"--jobs={job_id}", "--states=all", "--format=%T|%n|%x|%N"])
            if not output.strip():
                raise SchedulerError(f"Slurm does not know job {job_id}")
            state, requested, excluded, allocated = output.splitlines()[0].split(FIELD_SEPARATOR, 3)
            if state != "COMPLETING":
                return (
                    state,
                    expand_hostlist(requested.strip()),
                    expand_hostlist(excluded.strip()),
                    expand_hostlist(allocated.strip()),
                )
            if time.monotonic() > deadline:
                raise SchedulerError(
                    f"job {job_id} still completing after {self.timeout_s:g}s: its nodes have not confirmed it ended"
                )
            self.sleep(SETTLE_POLL_S)

    def restart_job(self, job_id: str, exclude_nodes: Sequence[str]) -> None:
        """Requeue a job and release it at once onto nodes other than exclude_nodes.

        Slurm holds a requeued job back: when its old run has finished completing, it sets
        the job's begin time to the credential lifetime ahead (120 s by default). fleetctl
        waits for that moment and sets the begin time to now, so the job starts as soon as
        healthy nodes are free. Safe to repeat: a job already pending is only updated.
        """
        self._restart(job_id, exclude_nodes, ())

    def restart_job_on(self, job_id: str, exclude_nodes: Sequence[str], nodes: Sequence[str]) -> None:
        """restart_job, onto exactly `nodes` (ReqNodeList): the job's good nodes and the
        replacements fleetctl chose in its island (fleetctl.jobs.placement)."""
        if not nodes:
            raise SchedulerError(f"restart of job {job_id} onto named nodes names none")
        self._restart(job_id, exclude_nodes, nodes)

    def release_nodes(self, job_id: str) -> None:
        """Clear the pending job's ReqNodeList (an empty value is Slurm's "none"); its
        ExcNodeList stays, so it still avoids the bad nodes."""
        self._command(["scontrol", "update", f"JobId={validate_job_id(job_id)}", "ReqNodeList="])

    def spares(self) -> dict[str, tuple[str, ...]]:
        """island -> the nodes of its fleetctl-spares-<island> reservation."""
        pools = {}
        for line in self._command(["scontrol", "show", "reservation", "--oneliner"]).splitlines():
            fields = dict(part.split("=", 1) for part in line.split() if "=" in part)
            name = fields.get("ReservationName", "")
            if name.startswith(SPARE_RESERVATION_PREFIX):
                nodes = fields.get("Nodes", "")
                pools[name.removeprefix(SPARE_RESERVATION_PREFIX)] = (
                    expand_hostlist(nodes) if nodes not in ("", "(null)") else ()
                )
        return pools

    def set_spares(self, island: str, nodes: Sequence[str]) -> None:
        """The island's reservation holds exactly `nodes`: created, updated, or deleted when
        none is left (an update to no nodes would make Slurm pick one itself). Only root may
        run jobs in it, and only by naming it: no job lands on a spare by accident; a restart
        takes one by taking it out of the reservation and naming it. Slurm refuses to reserve
        a node that runs a job."""
        if not _NODE_NAME.fullmatch(island):
            raise SchedulerError(f"invalid island name {island!r} for a Slurm reservation")
        name = SPARE_RESERVATION_PREFIX + island
        wanted = [validate_node_name(node) for node in nodes]
        current = self.spares().get(island)
        if set(current or ()) == set(wanted):
            return
        if not wanted:
            self._command(["scontrol", "delete", f"ReservationName={name}"])
        elif current is None:
            self._command(
                [
                    "scontrol",
                    "create",
                    "reservation",
                    f"ReservationName={name}",
                    f"Nodes={','.join(wanted)}",
                    "StartTime=now",
                    "Duration=infinite",
                    "Users=root",
                ]
            )
        else:
            self._command(["scontrol", "update", f"ReservationName={name}", f"Nodes={','.join(wanted)}"])

    def requeue(self, job_id: str) -> None:
        """Requeue the running job now and leave it held: restart_job or restart_job_on
        releases it. The caller decides where it goes while slurmds' revoke second (below)
        passes, instead of before it. A job already pending is left as it is."""
        self._requeue(validate_job_id(job_id))

    def _requeue(self, job_id: str) -> None:
        state, _, _, ran_on = self._job_once_settled(job_id)
        if state != "PENDING":
            self._command(["scontrol", "requeue", job_id])
            self._requeued[job_id] = (self.clock(), ran_on)

    def _restart(self, job_id: str, exclude_nodes: Sequence[str], place_on: Sequence[str]) -> None:
        validate_job_id(job_id)
        excluded = [validate_node_name(node) for node in exclude_nodes]
        place_on = [validate_node_name(node) for node in place_on]
        if set(place_on) & set(excluded):
            raise SchedulerError(
                f"restart of job {job_id}: {sorted(set(place_on) & set(excluded))[0]} is both excluded and asked for"
            )
        self._requeue(job_id)
        requeued_at, ran_on = self._requeued.pop(job_id, (None, ()))
        _, requested, already_excluded, _ = self._job_once_settled(job_id)
        update = ["scontrol", "update", f"JobId={job_id}"]
        all_excluded = dict.fromkeys([*already_excluded, *excluded])
        if all_excluded:
            update.append(f"ExcNodeList={','.join(all_excluded)}")
        if place_on:
            update.append(f"ReqNodeList={','.join(place_on)}")
        elif set(requested) & set(excluded):
            # A job that asked for a bad node by name could never start again; it keeps the
            # nodes it asked for that are still good, and Slurm picks the rest.
            update.append(f"ReqNodeList={','.join(node for node in requested if node not in excluded)}")
        update.append("StartTime=now")
        # slurmds refuse a launch credential issued in the same whole second as the requeue
        # revoked the old one (issue time <= revoke time) and the job fails at once, so
        # release it only once slurmctld's clock (NTP-synced with this one) is past it.
        # Not StartTime=now+1: nothing would wake the scheduler when that second comes.
        # Only the nodes the job ran on were told of the revoke: a job named onto nodes of
        # which none ran it (a hot spare for a 1-node job) is released at once.
        if requeued_at is not None and not (place_on and not set(place_on) & set(ran_on)):
            self.sleep(max(0.0, math.floor(requeued_at) + 1 + CLOCK_SKEW_ALLOWANCE_S - self.clock()))
        self._command(update)
