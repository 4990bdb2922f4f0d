"""The hung-job judge's activity: the running jobs late on their checkpoints, what their nodes
said since their last progress (GPU utilisation from Prometheus, health events, NCCL watchdog
lines reported as health events, open straggler findings), judged by fleetctl.jobs.hang; each
late job's verdict recorded (fleetctl.db.hangs: `job show`, the report, the exporter); and
which hung jobs are due a restart off the node they hung on. Recording here, not in a
workflow step of its own, keeps the HungJobs workflow's commands as they were."""

from __future__ import annotations

from collections import defaultdict

from temporalio import activity

from fleetctl.connections.promql_client import Prometheus, PrometheusError
from fleetctl.db import hangs, queries, stragglers
from fleetctl.db import jobs as jobs_db
from fleetctl.db.models import Job, JobRestart, Node, utcnow
from fleetctl.durations import as_utc
from fleetctl.jobs.hang import (
    GPU_UTIL,
    HangPolicy,
    HangState,
    HangVerdict,
    JobProgress,
    NodeEvidence,
    WatchdogTimeout,
    judge_hang,
    last_progress,
    parse_watchdog_timeouts,
)
from fleetctl.nodes.capacity import in_fleet
from fleetctl.workflows.activities.database import DatabaseActivities
from fleetctl.workflows.api import HungJobDrain, HungJobsInput, HungJobsTick

# A health event of these severities on a job's node since its progress stopped is a fault
# the hang is blamed on; an informational one is not.
FAULT_SEVERITIES = ("warning", "critical")


class HangActivities(DatabaseActivities):
    @activity.defn
    def judge_hung_jobs(self, req: HungJobsInput) -> HungJobsTick:
        """One judging of the fleet's running jobs. Prometheus is asked only about the nodes of
        jobs already late on their checkpoints; an answer it could not give is an error in the
        tick, never a pass (the job's GPUs then say nothing; a watchdog line still may)."""
        s, now = self.settings, utcnow()
        tick = HungJobsTick(policy=s.hang_policy)
        fleet = {n.name: n for n in queries.list_nodes(self.engine) if in_fleet(n.labels, req.fleet)}
        everywhere = stragglers.running_jobs(self.engine)
        running = [j for j in everywhere if any(n in fleet for n in j.nodes)]
        tick.jobs = len(running)
        late = []
        for job in running:
            restarts = jobs_db.job_restarts(self.engine, job.job_id)
            if any(r.status == "in_progress" for r in restarts):
                continue  # being restarted: not running where it hung, nor yet anywhere else
            progress = self._progress(job, restarts)
            verdict = judge_hang(progress, now, NodeEvidence({}), s.hang_cadence_factor, s.hang_idle_pct)
            if verdict.state not in (HangState.PROGRESSING, HangState.NO_CADENCE):
                late.append((job, progress))
        util = self._gpu_util(sorted({n for job, _ in late for n in job.nodes}), tick.errors) if late else {}
        verdicts = []
        for job, progress in late:
            activity.heartbeat(job.job_id)
            verdict = judge_hang(
                progress, now, self._evidence(job, progress, util), s.hang_cadence_factor, s.hang_idle_pct
            )
            verdicts.append((verdict, last_progress(progress)))
            if verdict.state is HangState.HUNG:
                tick.flagged.append(verdict.evidence)
                due = self._due(job, verdict, fleet)
                if due is not None:
                    tick.due.append(due)
            elif verdict.state is HangState.NO_EVIDENCE:
                tick.no_evidence.append(verdict.evidence)
        hangs.record_verdicts(self.engine, verdicts, {j.job_id for j in running}, {j.job_id for j in everywhere}, now)
        return tick

    def _progress(self, job: Job, restarts: list[JobRestart]) -> JobProgress:
        """The job's checkpoints, and its latest start: the jobs table keeps its first (its
        wall time runs through restarts) and its latest run's as the scheduler says (a requeue
        of the scheduler's own), a restart's row when fleetctl's restart ran it again."""
        checkpoints = jobs_db.job_checkpoints(self.engine, job.job_id)
        if job.last_checkpoint_at is not None:
            checkpoints.append(as_utc(job.last_checkpoint_at))
        runs = (job.started_at, job.run_started_at, *(r.running_at for r in restarts))
        starts = [as_utc(at) for at in runs if at is not None]
        return JobProgress(job.job_id, tuple(job.nodes), max(starts, default=None), tuple(checkpoints))

    def _gpu_util(self, nodes: list[str], errors: list[str]) -> dict[str, float]:
        s = self.settings
        try:
            prometheus = Prometheus(s.prometheus_url, s.prometheus_token, s.prometheus_timeout_s, s.prometheus_ca_path)
            return prometheus.query(
                GPU_UTIL.promql(nodes, s.prometheus_node_label, int(s.hang_window_s)), s.prometheus_node_label
            )
        except PrometheusError as exc:
            errors.append(f"{GPU_UTIL.name}: {exc}")
            return {}

    def _evidence(self, job: Job, progress: JobProgress, util: dict[str, float]) -> NodeEvidence:
        """What the job's nodes said since its last progress."""
        faults: dict[str, str] = {}
        watchdog: dict[str, list[WatchdogTimeout]] = defaultdict(list)
        for event in queries.health_events_since(self.engine, job.nodes, last_progress(progress)):
            timeouts = parse_watchdog_timeouts(event.message)
            if timeouts:
                watchdog[event.node_name] += timeouts
            elif event.severity in FAULT_SEVERITIES and event.node_name not in faults:
                said = f"XID {event.code}" if event.code is not None else event.message[:120]
                faults[event.node_name] = f"{event.severity} health event at {as_utc(event.at):%H:%M:%S}: {said}"
        found = {
            f.node_name: f"straggler {f.metric}: {f.evidence}"
            for f in stragglers.open_findings(self.engine)
            if f.job_id == job.job_id
        }
        return NodeEvidence({n: util[n] for n in job.nodes if n in util}, faults, found, watchdog)

    def _due(self, job: Job, verdict: HangVerdict, fleet: dict[str, Node]) -> HungJobDrain | None:
        """The drain and restart a hung job is due: under restart-off-node, when it was
        localised to one production node of this fleet (a node already out is its own
        workflow's: its drain restarts the job)."""
        if self.settings.hang_policy != HangPolicy.RESTART.value or len(verdict.suspects) != 1:
            return None
        node = fleet.get(verdict.suspects[0])
        if node is None or node.state != "production":
            return None
        return HungJobDrain(node.name, node.rack, job.job_id, job.scheduler, verdict.evidence)
