"""Hung jobs: a running job whose progress stopped, and the node it most likely hung on.

Pure: the job's own checkpoint cadence, whether it is late by more than `factor` cadences,
what its GPUs say (dcgm-exporter's DCGM_FI_DEV_GPU_UTIL, each node's busiest GPU averaged
over a window), PyTorch's NCCL watchdog lines its nodes reported, and which of its nodes is
to blame. The queries are `fleetctl.connections.promql_client`'s; the periodic judge is the
HungJobs workflow, which drains the node through the capacity guard and restarts the job
off it as that drain's fault.

A job late on its checkpoint with its GPUs busy is slow, not hung (a checkpoint interval is
not a contract): it is flagged only when its GPUs stopped too, or an NCCL collective timed
out. A job that never reported two checkpoints has no cadence of its own and is not judged:
a guess at a cadence would restart healthy jobs.
"""

from __future__ import annotations

import re
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from enum import Enum
from itertools import pairwise

from fleetctl.jobs.stragglers import Telemetry


class HangPolicy(str, Enum):
    """What the judge does with a hung job: flag it only, or also restart it off the node it
    hung on (drained through the capacity guard)."""

    FLAG_ONLY = "flag-only"
    RESTART = "restart-off-node"


class HangState(str, Enum):
    HUNG = "hung"
    PROGRESSING = "progressing"  # a checkpoint within `factor` cadences
    SLOW = "slow"  # late on its checkpoint, but its GPUs are busy and no collective timed out
    NO_CADENCE = "no_cadence"  # fewer than two checkpoints: no cadence of its own
    NO_EVIDENCE = "no_evidence"  # late, but no node's GPUs reported and no watchdog line


class Localised(str, Enum):
    """How the suspect node was found, in order of the evidence's weight."""

    FAULT = "fault"  # a health event on the node since progress stopped
    STRAGGLER = "straggler"  # an open straggler finding on the node in this job
    WATCHDOG = "watchdog"  # its ranks timed out on an earlier collective, or not at all
    GPUS_DIFFER = "gpus differ"  # its GPUs busy (or silent) while the others' idle, or the reverse
    NONE = "none"


# The name a hang's drain is recorded and remediated under (`check job-hang`): the report's
# rule precision then says how often the judge was right.
HANG_CHECK = "job-hang"

# Each node's busiest GPU (max across its GPUs of each one's average over the window): a
# node is idle only when every GPU of it is.
GPU_UTIL = Telemetry("gpu_util", ("DCGM_FI_DEV_GPU_UTIL",), False, "%", 1.0)

# PyTorch's ProcessGroupNCCL watchdog, as it logs a collective that timed out, e.g.
# "[Rank 0] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=1580,
# OpType=ALLREDUCE, NumelIn=466119168, NumelOut=466119168, Timeout(ms)=600000) ran for
# 600060 milliseconds before timing out." (tests/fixtures/nccl_watchdog/).
_WATCHDOG = re.compile(
    r"\[Rank (?P<rank>\d+)\] Watchdog caught collective operation timeout: "
    r"WorkNCCL\(SeqNum=(?P<seq>\d+), OpType=(?P<op>[A-Z_]+)"
)


@dataclass(frozen=True)
class WatchdogTimeout:
    rank: int
    seq_num: int  # the collective's sequence number in its process group
    op_type: str


def parse_watchdog_timeouts(text: str) -> list[WatchdogTimeout]:
    """Every NCCL watchdog timeout line in `text`; other lines are ignored."""
    return [WatchdogTimeout(int(m["rank"]), int(m["seq"]), m["op"]) for m in _WATCHDOG.finditer(text)]


@dataclass(frozen=True)
class JobProgress:
    job_id: str
    nodes: tuple[str, ...]
    started_at: datetime | None  # its latest (re)start: progress is counted from there too
    checkpoints: tuple[datetime, ...]  # every checkpoint it reported, any order


@dataclass(frozen=True)
class NodeEvidence:
    """What the job's nodes said since its last progress."""

    gpu_util: Mapping[str, float]  # node -> its busiest GPU's utilisation, %; a node absent: no series
    faults: Mapping[str, str] = field(default_factory=dict)  # node -> the health event, in words
    stragglers: Mapping[str, str] = field(default_factory=dict)  # node -> its open finding, in words
    watchdog: Mapping[str, Sequence[WatchdogTimeout]] = field(default_factory=dict)


@dataclass(frozen=True)
class HangVerdict:
    job_id: str
    state: HangState
    suspects: tuple[str, ...]
    localised: Localised
    evidence: str


def cadence_s(checkpoints: Sequence[datetime]) -> float | None:
    """The median gap between the job's consecutive checkpoints; None under two."""
    times = sorted(set(checkpoints))
    gaps = [(b - a).total_seconds() for a, b in pairwise(times)]
    return statistics.median(gaps) if gaps else None


def last_progress(job: JobProgress) -> datetime:
    """When the job last showed progress: its latest checkpoint, or its (re)start if later.
    A job with neither has none (judge_hang asks only of a job with a cadence)."""
    return max([*job.checkpoints, *([job.started_at] if job.started_at else [])])


def judge_hang(job: JobProgress, now: datetime, evidence: NodeEvidence, factor: float, idle_pct: float) -> HangVerdict:
    """Is the running `job` hung, and on which node: late by more than `factor` of its own
    cadences, and its GPUs stopped (every node that reports idle, at most `idle_pct`) or an
    NCCL collective timed out on one of its nodes."""
    cadence = cadence_s(job.checkpoints)
    if cadence is None:
        return _verdict(job, HangState.NO_CADENCE, f"job {job.job_id}: fewer than two checkpoints, no cadence")
    last = last_progress(job)
    quiet = (now - last).total_seconds()
    said = f"job {job.job_id}: no checkpoint for {quiet:.0f} s, its cadence {cadence:.0f} s"
    if quiet <= factor * cadence:
        return _verdict(job, HangState.PROGRESSING, said)
    nodes = job.nodes
    reporting = [n for n in nodes if n in evidence.gpu_util]
    idle = [n for n in reporting if evidence.gpu_util[n] <= idle_pct]
    timed_out = [n for n in nodes if evidence.watchdog.get(n)]
    if not reporting and not timed_out:
        return _verdict(job, HangState.NO_EVIDENCE, f"{said}; no GPU utilisation series and no watchdog line")
    if not idle and not timed_out:
        return _verdict(job, HangState.SLOW, f"{said}; but its GPUs are busy: slow, not hung")
    gpus = f"{len(idle)} of {len(nodes)} nodes' GPUs idle (at most {idle_pct:g}%)"
    watchdog = f", NCCL watchdog timeouts on {', '.join(timed_out)}" if timed_out else ""
    suspects, localised, why = _localise(nodes, evidence, idle_pct)
    return HangVerdict(job.job_id, HangState.HUNG, suspects, localised, f"{said}; {gpus}{watchdog}; {why}")


def _localise(nodes: Sequence[str], evidence: NodeEvidence, idle_pct: float) -> tuple[tuple[str, ...], Localised, str]:
    """The nodes to blame, by the strongest evidence there is; none when the nodes look alike."""
    faulted = [n for n in nodes if n in evidence.faults]
    if faulted:
        return tuple(faulted), Localised.FAULT, "; ".join(f"{n}: {evidence.faults[n]}" for n in faulted)
    straggling = [n for n in nodes if n in evidence.stragglers]
    if straggling:
        return tuple(straggling), Localised.STRAGGLER, "; ".join(f"{n}: {evidence.stragglers[n]}" for n in straggling)
    behind = _behind_on_collectives(nodes, evidence.watchdog)
    if behind:
        return (
            behind,
            Localised.WATCHDOG,
            f"{', '.join(behind)}: behind the other ranks on the collective that timed out",
        )
    differ = _minority(nodes, evidence.gpu_util, idle_pct)
    if differ:
        return differ, Localised.GPUS_DIFFER, f"{', '.join(differ)}: GPUs unlike the job's other nodes"
    return (), Localised.NONE, "no node stands out: not restarted"


def _behind_on_collectives(nodes: Sequence[str], watchdog: Mapping[str, Sequence[WatchdogTimeout]]) -> tuple[str, ...]:
    """The nodes the others waited on: when some ranks time out on a collective, the rank that
    never joined it either logs no timeout (stuck in compute) or times out on an earlier one."""
    reported = {n: min(t.seq_num for t in watchdog[n]) for n in nodes if watchdog.get(n)}
    if not reported:
        return ()
    silent = tuple(n for n in nodes if n not in reported)
    if silent and len(silent) < len(nodes) / 2:
        return silent
    earliest = min(reported.values())
    behind = tuple(n for n, seq in reported.items() if seq == earliest)
    return behind if len(behind) < len(reported) / 2 else ()


def _minority(nodes: Sequence[str], util: Mapping[str, float], idle_pct: float) -> tuple[str, ...]:
    """The nodes outside the job's majority (idle, busy, or no series), when one side holds
    more than half of the nodes."""
    side = {n: "silent" if n not in util else "idle" if util[n] <= idle_pct else "busy" for n in nodes}
    counts = {s: sum(1 for v in side.values() if v == s) for s in set(side.values())}
    majority = max(counts, key=lambda s: counts[s])
    if counts[majority] * 2 <= len(nodes):
        return ()
    return tuple(n for n in nodes if side[n] != majority)


def _verdict(job: JobProgress, state: HangState, evidence: str) -> HangVerdict:
    return HangVerdict(job.job_id, state, (), Localised.NONE, evidence)
