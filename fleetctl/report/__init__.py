"""The fleet reliability report: `build_report` gathers it from the database as a JSON-safe
dict, `render_html` turns that dict into one self-contained HTML file (inline CSS and SVG,
no scripts, nothing fetched). The numbers and their definitions are fleetctl.metrics'.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from dataclasses import asdict
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from fleetctl import metrics
from fleetctl.metrics_load import load_history
from fleetctl.db import queries

if TYPE_CHECKING:
    from sqlalchemy.engine import Engine

# NodeState.colour names rich's colours; the same hues for the browser.
_CSS_COLOURS = {
    "white": "#cfd8dc", "cyan": "#26c6da", "blue": "#1e88e5", "magenta": "#ab47bc", "green": "#43a047",
    "yellow": "#fdd835", "dark_orange": "#fb8c00", "red": "#e53935", "grey50": "#7f7f7f",
}
TIMELINE_POINTS = 60


def state_colour(state: str) -> str:
    from fleetctl.lifecycle import NodeState

    try:
        return _CSS_COLOURS[NodeState(state).colour]
    except ValueError:
        return "#000000"


def _iso(value: datetime) -> str:
    return metrics.as_utc(value).isoformat()


DEFAULT_JOB_GPUS = 1024


def build_report(engine: Engine, since: datetime, now: datetime, *, fleet: str = "default", lemon_threshold: int = 3,
                 lemon_window: timedelta = timedelta(days=7), job_gpus: int = DEFAULT_JOB_GPUS) -> dict[str, Any]:
    """The report over [since, now] (both aware or both UTC-naive datetimes); MTTF and
    predicted ETTR also at a job of `job_gpus` GPUs."""
    since, now = metrics.as_utc(since), metrics.as_utc(now)
    history = load_history(engine, since)
    nodes = history.nodes

    def grouped(key) -> dict[str, dict]:
        groups: dict[str, list[metrics.NodeHistory]] = defaultdict(list)
        for h in nodes:
            groups[key(h.node) or "-"].append(h)
        return {name: asdict(metrics.summarise(members, since, now)) for name, members in sorted(groups.items())}

    where = {h.node.name: h.node for h in nodes}
    failures = sorted(
        (t for h in nodes for t in metrics.failures(metrics.timeline(h.node.created_at, h.transitions, now), since, now)),
        key=lambda t: (t.at, t.node),
    )
    goodputs = [(job, g) for job in history.jobs if metrics.ran_in_window(job, since, now)
                and (g := metrics.job_goodput(job, now)) is not None]
    stragglers = [_straggler_group(g) for g in metrics.stragglers(history.check_samples)]
    latencies = metrics.restart_latencies([job for job, _ in goodputs], since, now)
    summary = metrics.summarise(nodes, since, now)
    return {
        "fleet": fleet,
        "generated_at": _iso(now),
        "window": {"since": _iso(since), "until": _iso(now), "days": (now - since).total_seconds() / 86400},
        "summary": asdict(summary),
        "racks": grouped(lambda n: n.rack),
        "profiles": grouped(lambda n: n.profile),
        "failures": [{"node": t.node, "rack": where[t.node].rack, "profile": where[t.node].profile, "at": _iso(t.at),
                      "cause": metrics.failure_label(t), "detail": t.cause} for t in failures],
        "lemons": [{"node": name, "rack": where[name].rack, "profile": where[name].profile, "times_remediated": count}
                   for name, count in metrics.lemon_nodes(nodes, since, now, lemon_threshold, lemon_window).items()],
        "jobs": _jobs(goodputs, summary, latencies, since, now, job_gpus),
        "restart_latency": {**metrics.distribution(latencies), "seconds": sorted(latencies)},
        "stragglers": stragglers,
        "straggler_nodes": [{"node": n["node"], "profile": g["profile"], "check": g["check"], "metric": g["metric"],
                             "value": n["value"], "median": g["median"], "robust_z": n["robust_z"]}
                            for g in stragglers for n in g["nodes"] if n["straggler"]],
        "state_over_time": _state_over_time(nodes, since, now),
        # Why automation paused (a storm of failures, or of unjudgeable checks) and who resumed it.
        "breaker": [{"at": _iso(e.at), "kind": e.kind, "reason": e.reason, "actor": e.actor}
                    for e in queries.breaker_events(engine, fleet) if since <= metrics.as_utc(e.at) <= now],
    }


def _jobs(goodputs: list[tuple[metrics.JobRecord, metrics.JobGoodput]], summary: metrics.Summary,
          latencies: list[float], since: datetime, now: datetime, job_gpus: int) -> dict[str, Any]:
    """ETTR measured and as Meta's model predicts it, per job and for the fleet, interruptions
    by cause, and MTTF at a job of `job_gpus` GPUs."""
    rate = metrics.failure_rate_per_gpu_hour(summary.production_gpu_hours, summary.failures)
    interval = metrics.checkpoint_interval_seconds(job for job, _ in goodputs)
    restart_s = sum(latencies) / len(latencies) if latencies else None
    per_job = []
    for job, g in goodputs:
        own_interval = metrics.checkpoint_interval_seconds([job])
        per_job.append({
            "job_id": job.job_id, "name": job.name, "gpus": job.gpus, "wall_hours": g.wall_seconds / 3600,
            "downtime_seconds": g.downtime_seconds, "lost_seconds": g.lost_seconds, "ettr": g.ettr,
            "predicted_ettr": metrics.predicted_ettr(job.gpus, rate, own_interval or interval, restart_s),
            "restarts": len(job.restarts), "scheduler_restarts": job.scheduler_restarts,
            "checkpoints": len(metrics.job_checkpoints(job)),
            "last_checkpoint_at": _iso(c[-1]) if (c := metrics.job_checkpoints(job)) else None,
            "restart_seconds": metrics.restart_latencies([job], since, now),
            "interruptions": metrics.interruptions(job),
        })
    predicted = [(p["predicted_ettr"], g.wall_seconds) for p, (_, g) in zip(per_job, goodputs)
                 if p["predicted_ettr"] is not None]
    wall = sum(w for _, w in predicted)
    return {
        "ettr": metrics.fleet_ettr(g for _, g in goodputs),
        "predicted_ettr": sum(p * w for p, w in predicted) / wall if wall > 0 else None,
        "checkpoint_interval_seconds": interval,
        "failure_rate_per_gpu_hour": rate,
        "interruptions": dict(Counter(label for p in per_job for label in p["interruptions"]).most_common()),
        "at_job_size": {"gpus": job_gpus, "mttf_hours": metrics.mttf_at_job_size_hours(rate, job_gpus),
                        "predicted_ettr": metrics.predicted_ettr(job_gpus, rate, interval, restart_s)},
        "per_job": per_job,
    }


def _straggler_group(group: metrics.StragglerGroup) -> dict[str, Any]:
    return {
        "check": group.check, "metric": group.metric, "profile": group.profile, "median": group.median,
        "nodes": [{"node": node, "value": v.value, "robust_z": v.robust_z, "straggler": v.straggler, "reason": v.reason}
                  for node, v in group.verdicts.items()],
    }


def _state_over_time(nodes: list[metrics.NodeHistory], since: datetime, now: datetime) -> dict[str, Any]:
    """Nodes per state at the middle of each of TIMELINE_POINTS equal slices of the window."""
    step = (now - since) / TIMELINE_POINTS
    times = [since + step * (k + 0.5) for k in range(TIMELINE_POINTS)]
    spans = {h.node.name: metrics.intervals(h.node.created_at, metrics.timeline(h.node.created_at, h.transitions, now), now)
             for h in nodes}
    return {"times": [_iso(t) for t in times], "counts": metrics.states_at(spans, times)}


def render_html(report: dict[str, Any]) -> str:
    from jinja2 import Environment, PackageLoader, StrictUndefined, select_autoescape

    from fleetctl.lifecycle import NodeState
    from fleetctl.report import svg

    env = Environment(loader=PackageLoader("fleetctl", "report/templates"), undefined=StrictUndefined,
                      autoescape=select_autoescape(["html", "j2"], default=True))
    env.filters["num"] = lambda v, digits=1: "—" if v is None else f"{v:,.{digits}f}"
    env.filters["pct"] = lambda v, digits=2: "—" if v is None else f"{v * 100:.{digits}f}%"
    states = [s.value for s in NodeState]
    timeline = report["state_over_time"]
    plots = {
        "states": svg.stacked_columns(
            [t[5:16].replace("T", " ") for t in timeline["times"]],
            [(s, state_colour(s), timeline["counts"][s]) for s in states if s in timeline["counts"]],
            "Nodes per state over the window"),
        "causes": svg.bar_chart(list(report["summary"]["causes"].items()), "Failures by cause"),
        "restarts": svg.histogram(report["restart_latency"]["seconds"], "Job restart latency",
                                  "seconds from the fault to the job running again"),
        # Profiles differ several-fold on the same metric: each strip is relative to its own median.
        "stragglers": [
            svg.strip_plot([(g["profile"], 100.0, [(n["node"], _percent_of(n["value"], g["median"]), n["straggler"],
                                                    f"{n['value']:g} (median {g['median']:g})") for n in g["nodes"]])
                            for g in groups],
                           f"{name} per profile", f"{name}, % of the profile's median")
            for name, groups in _by_metric(report["stragglers"]).items()
        ],
    }
    return env.get_template("report.html.j2").render(
        r=report, plots=plots, states=states, colour=state_colour, definitions=_definitions())


def _percent_of(value: float, median: float | None) -> float:
    return value / median * 100 if median else 100.0


def _by_metric(groups: list[dict]) -> dict[str, list[dict]]:
    by_metric: dict[str, list[dict]] = defaultdict(list)
    for g in groups:
        by_metric[f"{g['check']} {g['metric']}"].append(g)
    return dict(by_metric)


def _definitions() -> list[str]:
    """The definition paragraphs of fleetctl.metrics' docstring, one string per bullet."""
    text = metrics.__doc__ or ""
    bullets = text.split("Definitions", 1)[-1].split("\n- ")[1:]
    return [" ".join(b.split()) for b in bullets]
