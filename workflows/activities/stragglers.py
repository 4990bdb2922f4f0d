"""Activities of the production straggler judge: ask Prometheus for the running jobs'
nodes, judge each job's nodes against each other (fleetctl.jobs.stragglers), record the
findings, and say which stragglers are due to be drained; record how each drain went."""

from __future__ import annotations

from collections import defaultdict
from datetime import datetime

from temporalio import activity

from fleetctl.connections.promql_client import Prometheus, PrometheusError
from fleetctl.db import queries, stragglers
from fleetctl.db.models import Node, StragglerFinding, utcnow
from fleetctl.durations import as_utc
from fleetctl.jobs.stragglers import DRAIN_AT_CHECKPOINT, TELEMETRY, drain_due, judge_job, reconcile, unjudged
from fleetctl.nodes.capacity import in_fleet
from fleetctl.workflows.activities.database import DatabaseActivities, stored_id
from fleetctl.workflows.api import StragglerDrain, StragglerDrainRecord, StragglerSweepInput, StragglerTick

NO_EVIDENCE_KEPT = 100


class StragglerActivities(DatabaseActivities):
    @activity.defn
    def judge_running_jobs(self, req: StragglerSweepInput) -> StragglerTick:
        """One judging of the fleet's running jobs. A metric Prometheus could not answer is an
        error in the tick (judged again next tick), never a pass: its open findings stay open."""
        s, now = self.settings, utcnow()
        tick = StragglerTick(policy=s.straggler_policy)
        fleet = {n.name: n for n in queries.list_nodes(self.engine) if in_fleet(n.labels, req.fleet)}
        jobs = [j for j in stragglers.running_jobs(self.engine) if any(n in fleet for n in j.nodes)]
        tick.jobs = len(jobs)
        if jobs:
            telemetry = self._telemetry(sorted({n for j in jobs for n in j.nodes}), tick.errors)
            findings = stragglers.as_open(stragglers.open_findings(self.engine))
            for job in jobs:
                activity.heartbeat(job.job_id)
                verdicts = judge_job(job.job_id, job.nodes, telemetry, s.straggler_threshold, s.straggler_min_nodes)
                new, cleared = reconcile(job.job_id, findings, verdicts)
                # Only this fleet's production nodes are flagged: one already out (draining
                # under the job, say) still counts among the job's peers, but is no finding.
                new = [v for v in new if v.node in fleet and fleet[v.node].state == "production"]
                stragglers.record_findings(self.engine, job, new, cleared, now)
                tick.flagged += [f"{v.node} ({job.job_id}): {v.evidence}" for v in new]
                tick.cleared += [f"{v.node} ({job.job_id}): {v.evidence}" for _, v in cleared]
                tick.no_evidence += unjudged(job.job_id, verdicts)
            if len(tick.no_evidence) > NO_EVIDENCE_KEPT:  # a payload, and a list someone reads
                tick.no_evidence[NO_EVIDENCE_KEPT:] = [f"... and {len(tick.no_evidence) - NO_EVIDENCE_KEPT} more"]
        tick.due = self._due(fleet, now)
        tick.still_open = sum(r.node_name in fleet for r in stragglers.open_findings(self.engine))
        return tick

    def _telemetry(self, nodes: list[str], errors: list[str]) -> dict[str, dict[str, float]]:
        """{metric: {node: value}} of every metric Prometheus answered; the others are errors."""
        s = self.settings
        try:
            prometheus = Prometheus(s.prometheus_url, s.prometheus_token, s.prometheus_timeout_s, s.prometheus_ca_path)
        except PrometheusError as exc:
            errors.append(str(exc))
            return {}
        telemetry = {}
        for spec in TELEMETRY:
            activity.heartbeat(spec.name)
            try:
                telemetry[spec.name] = prometheus.query(
                    spec.promql(nodes, s.prometheus_node_label, int(s.straggler_window_s)), s.prometheus_node_label
                )
            except PrometheusError as exc:
                errors.append(f"{spec.name}: {exc}")
        return telemetry

    def _due(self, fleet: dict[str, Node], now: datetime) -> list[StragglerDrain]:
        """The open findings whose node may be drained now, one drain per node. A finding
        whose node left production otherwise is closed; under flag-only, one whose job
        ended too (nothing is drained, so nothing is left to wait for)."""
        rows = [r for r in stragglers.open_findings(self.engine) if r.node_name in fleet]
        jobs = stragglers.jobs_by_id(self.engine, [r.job_id for r in rows])
        drain = self.settings.straggler_policy == DRAIN_AT_CHECKPOINT
        due: dict[str, list[tuple[StragglerFinding, str]]] = defaultdict(list)
        for row in rows:
            node, job = fleet[row.node_name], jobs.get(row.job_id)
            if node.state != "production":
                stragglers.resolve(
                    self.engine, [stored_id(row.id)], stragglers.CLOSED, f"the node left production ({node.state})", now
                )
                continue
            why = drain_due(
                as_utc(row.found_at),
                row.job_restart_count,
                job.state if job else "gone",
                as_utc(job.last_checkpoint_at) if job and job.last_checkpoint_at else None,
                job.restart_count if job else 0,
            )
            if why is None:
                continue
            if drain:
                due[row.node_name].append((row, why))
            elif not job or job.state != "running":
                stragglers.resolve(self.engine, [stored_id(row.id)], stragglers.CLOSED, f"flag-only: {why}", now)
        drains = []
        for name, found in sorted(due.items()):
            (first, why), job = found[0], jobs.get(found[0][0].job_id)
            drains.append(
                StragglerDrain(
                    node=name,
                    rack=fleet[name].rack,
                    job_id=first.job_id,
                    metric=first.metric,
                    evidence=first.evidence,
                    why=why,
                    finding_ids=[stored_id(r.id) for r, _ in found],
                    restart_job=job is not None and job.state == "running" and name in (job.nodes or []),
                    scheduler=job.scheduler if job else "",
                )
            )
        return drains

    @activity.defn
    def record_straggler_drain(self, rec: StragglerDrainRecord) -> None:
        stragglers.resolve(
            self.engine, rec.finding_ids, stragglers.DRAINED if rec.drained else None, rec.detail, utcnow()
        )
