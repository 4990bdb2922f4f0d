"""The fleet reliability report. Pure: `assemble_report` makes the JSON-safe dict from what
fleetctl.reliability.report_store loaded (`build_report`), `render_html` turns that dict into
one self-contained HTML file (inline CSS and SVG, no scripts, nothing fetched). The numbers
and their definitions are fleetctl.reliability.metrics'.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Callable, Sequence
from dataclasses import asdict
from datetime import datetime, timedelta
from typing import Any

from fleetctl.durations import as_utc
from fleetctl.jobs.placement import placement_counts
from fleetctl.nodes.fleet_status import rack_view
from fleetctl.reliability import metrics

# NodeState.colour names rich's colours; the same hues for the browser.
_CSS_COLOURS = {
    "white": "#cfd8dc",
    "cyan": "#26c6da",
    "blue": "#1e88e5",
    "magenta": "#ab47bc",
    "green": "#43a047",
    "yellow": "#fdd835",
    "dark_orange": "#fb8c00",
    "red": "#e53935",
    "grey50": "#7f7f7f",
}
TIMELINE_POINTS = 60


def state_colour(state: str) -> str:
    from fleetctl.nodes.lifecycle import NodeState

    try:
        return _CSS_COLOURS[NodeState(state).colour]
    except ValueError:
        return "#000000"


def _iso(value: datetime) -> str:
    return as_utc(value).isoformat()


def duration(seconds: float | None, missing: str = "-") -> str:
    """A length of time for a human in the unit its size calls for (0.35 s, 12 s, 4.5 min,
    3.2 h, 12 d), three significant figures; `missing` for None. The one duration format of
    the report's table, HTML and CLI messages; -o json keeps raw numbers in the units its keys name."""
    if seconds is None:
        return missing
    for unit, size, below in (("s", 1, 60), ("min", 60, 3600), ("h", 3600, 2 * 86400)):
        if abs(seconds) < below:
            return f"{_figures(seconds / size)} {unit}"
    return f"{_figures(seconds / 86400)} d"


def hours(value: float | None, missing: str = "-") -> str:
    """`duration` of a figure the report keeps in hours (its *_hours keys)."""
    return duration(None if value is None else value * 3600, missing)


def lost_shares(summary: dict[str, Any]) -> tuple[float | None, float | None]:
    """What availability lost, as shares of capacity time: (planned work, faults)."""
    capacity = summary["production_hours"] + summary["planned_out_hours"] + summary["unplanned_out_hours"]
    if capacity <= 0:
        return None, None
    return summary["planned_out_hours"] / capacity, summary["unplanned_out_hours"] / capacity


def ettr_text(measured: float | None, at_least: float | None, missing: str = "-") -> str:
    """An ETTR for a person: the measured one, else its lower bound marked as one (≥), so a
    figure nobody measured never reads as measured; `missing` when there is neither."""
    if measured is not None:
        return f"{measured:.2%}"
    return missing if at_least is None else f"≥{at_least:.2%}"


def _figures(value: float) -> str:
    return f"{value:,.0f}" if abs(value) >= 100 else f"{value:.3g}"


DEFAULT_WINDOW = timedelta(days=7)
# A fleet whose first event is seconds old still gets a window its chart can slice.
MIN_WINDOW = timedelta(minutes=1)


def default_window(
    now: datetime, first_event: datetime | None, default: timedelta = DEFAULT_WINDOW
) -> tuple[datetime, str]:
    """The window's start when the operator gave no --since, and why: from the first recorded
    node event, so a fleet younger than `default` is not charted mostly empty, at most `default`."""
    now = as_utc(now)
    if first_event is None:
        return now - default, f"the default {duration(default.total_seconds())}: no node event is recorded yet"
    first_event = as_utc(first_event)
    if first_event <= now - default:
        return now - default, (
            f"the default {duration(default.total_seconds())}; older history is left out, --since widens the window"
        )
    since = min(first_event, now - MIN_WINDOW)
    return since, (
        "since the first recorded node event: the fleet's history is shorter than the default "
        f"{duration(default.total_seconds())}"
    )


DEFAULT_JOB_GPUS = 1024


def assemble_report(
    history: metrics.FleetHistory,
    since: datetime,
    now: datetime,
    *,
    production_stragglers: Sequence[dict[str, Any]] = (),
    hung_jobs: Sequence[dict[str, Any]] = (),
    restart_placements: Sequence[tuple[str | None, str | None]] = (),
    restarts_on_spares: int = 0,
    nodes_now: Sequence[Any] = (),
    breaker_events: Sequence[Any] = (),
    fleet: str = "default",
    lemon_threshold: int = 3,
    lemon_window: timedelta = timedelta(days=7),
    job_gpus: int = DEFAULT_JOB_GPUS,
    window_basis: str = "as asked",
) -> dict[str, Any]:
    """The report over [since, now] (both aware or both UTC-naive datetimes) from the loaded
    history and what the database says beside it (`nodes_now`: the Node rows as they are now,
    for the racks); MTTF and predicted ETTR also at a job of
    `job_gpus` GPUs; `window_basis` says why that window."""
    since, now = as_utc(since), as_utc(now)
    nodes = history.nodes

    def grouped(key: Callable[[metrics.NodeRecord], str | None]) -> dict[str, dict[str, Any]]:
        groups: dict[str, list[metrics.NodeHistory]] = defaultdict(list)
        for h in nodes:
            groups[key(h.node) or "-"].append(h)
        return {name: asdict(metrics.summarise(members, since, now)) for name, members in sorted(groups.items())}

    where = {h.node.name: h.node for h in nodes}
    failures = sorted(
        (
            t
            for h in nodes
            for t in metrics.failures(metrics.timeline(h.node.created_at, h.transitions, now), since, now)
        ),
        key=lambda t: (t.at, t.node),
    )
    goodputs = [
        (job, g)
        for job in history.jobs
        if metrics.ran_in_window(job, since, now) and (g := metrics.job_goodput(job, now)) is not None
    ]
    stragglers = [_straggler_group(g) for g in metrics.stragglers(history.check_samples)]
    latencies = metrics.restart_latencies([job for job, _ in goodputs], since, now)
    summary = metrics.summarise(nodes, since, now)
    return {
        "fleet": fleet,
        "generated_at": _iso(now),
        "window": {
            "since": _iso(since),
            "until": _iso(now),
            "days": (now - since).total_seconds() / 86400,
            "basis": window_basis,
        },
        "lemon_rule": {"threshold": lemon_threshold, "within_days": lemon_window.total_seconds() / 86400},
        "summary": asdict(summary),
        "racks": grouped(lambda n: n.rack),
        "profiles": grouped(lambda n: n.profile),
        "failures": [
            {
                "node": t.node,
                "rack": where[t.node].rack,
                "profile": where[t.node].profile,
                "at": _iso(t.at),
                "cause": metrics.failure_label(t),
                "detail": t.cause,
            }
            for t in failures
        ],
        "lemons": [
            {"node": name, "rack": where[name].rack, "profile": where[name].profile, "times_remediated": count}
            for name, count in metrics.lemon_nodes(nodes, since, now, lemon_threshold, lemon_window).items()
        ],
        # Running jobs' nodes behind their peers (the ProductionStragglers judge): found in
        # the window, or still open.
        "production_stragglers": list(production_stragglers),
        "rule_precision": _rule_precision(nodes, since, now),
        "jobs": _jobs(goodputs, summary, latencies, since, now, job_gpus),
        # The hung-job judge's findings (fleetctl.db.hangs.finding_row): last seen in the
        # window, or still open. Beside the interruptions: a hang is one before its restart.
        "hung_jobs": list(hung_jobs),
        "restart_latency": {**metrics.distribution(latencies), "seconds": sorted(latencies)},
        "restart_placement": {**placement_counts(restart_placements), "on_spares": restarts_on_spares},
        # The racks as they are now (not over the window), each node coloured by its state.
        "rack_view": rack_view(nodes_now),
        "stragglers": stragglers,
        "straggler_nodes": _straggler_nodes(stragglers),
        "state_over_time": _state_over_time(nodes, since, now),
        # Why automation paused (a storm of failures, or of unjudgeable checks) and who resumed it.
        "breaker": [
            {"at": _iso(e.at), "kind": e.kind, "reason": e.reason, "actor": e.actor}
            for e in breaker_events
            if since <= as_utc(e.at) <= now
        ],
    }


def _rule_precision(nodes: Sequence[metrics.NodeHistory], since: datetime, now: datetime) -> list[dict[str, Any]]:
    """Each automated rule's removals in the window and how they resolved."""
    return [
        {
            "rule": r.rule,
            "removals": r.removals,
            "confirmed": r.confirmed,
            "unchanged": r.unchanged,
            "open": r.open,
            "precision": r.precision,
            "usually_wrong": r.usually_wrong,
        }
        for r in metrics.rule_precision(nodes, since, now)
    ]


def _straggler_nodes(stragglers: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The nodes judged stragglers, one row each with their group's check and median."""
    return [
        {
            "node": n["node"],
            "profile": g["profile"],
            "check": g["check"],
            "metric": g["metric"],
            "value": n["value"],
            "median": g["median"],
            "robust_z": n["robust_z"],
        }
        for g in stragglers
        for n in g["nodes"]
        if n["straggler"]
    ]


def _jobs(
    goodputs: list[tuple[metrics.JobRecord, metrics.JobGoodput]],
    summary: metrics.Summary,
    latencies: list[float],
    since: datetime,
    now: datetime,
    job_gpus: int,
) -> dict[str, Any]:
    """ETTR measured and as Meta's model predicts it, per job and for the fleet, interruptions
    by cause, and MTTF at a job of `job_gpus` GPUs."""
    rate = metrics.failure_rate_per_gpu_hour(summary.production_gpu_hours, summary.failures)
    interval = metrics.checkpoint_interval_seconds(job for job, _ in goodputs)
    restart_s = sum(latencies) / len(latencies) if latencies else None
    per_job: list[dict[str, Any]] = []
    for job, g in goodputs:
        own_interval = metrics.checkpoint_interval_seconds([job])
        per_job.append(
            {
                "job_id": job.job_id,
                "name": job.name,
                "gpus": job.gpus,
                "wall_hours": g.wall_seconds / 3600,
                "downtime_seconds": g.downtime_seconds,
                # None when not known (ettr_unknown says why), beside the most it can be.
                "lost_seconds": g.lost_seconds if g.measured else None,
                "lost_seconds_at_most": g.lost_seconds + g.unknown_lost_at_most,
                "ettr": g.ettr,
                "ettr_at_least": g.ettr_at_least,
                "ettr_unknown": g.ettr_unknown or None,
                "predicted_ettr": metrics.predicted_ettr(job.gpus, rate, own_interval or interval, restart_s),
                "restarts": len(job.restarts),
                "scheduler_restarts": job.scheduler_restarts,
                "checkpoints": len(metrics.job_checkpoints(job)),
                "last_checkpoint_at": _iso(c[-1]) if (c := metrics.job_checkpoints(job)) else None,
                "restart_seconds": metrics.restart_latencies([job], since, now),
                "interruptions": metrics.interruptions(job),
            }
        )
    predicted = [
        (p["predicted_ettr"], g.wall_seconds)
        for p, (_, g) in zip(per_job, goodputs, strict=False)
        if p["predicted_ettr"] is not None
    ]
    wall = sum(w for _, w in predicted)
    unmeasured = sum(1 for _, g in goodputs if not g.measured)
    return {
        "ettr": metrics.fleet_ettr(g for _, g in goodputs),
        "ettr_at_least": metrics.fleet_ettr_at_least(g for _, g in goodputs),
        "ettr_unknown": (
            f"{unmeasured} of {len(goodputs)} jobs restarted with no checkpoint reported before the fault: "
            "the work they lost is not known, so the fleet's ETTR is a lower bound"
            if unmeasured
            else None
        ),
        "predicted_ettr": sum(p * w for p, w in predicted) / wall if wall > 0 else None,
        "checkpoint_interval_seconds": interval,
        "failure_rate_per_gpu_hour": rate,
        "interruptions": dict(Counter(label for p in per_job for label in p["interruptions"]).most_common()),
        "at_job_size": {
            "gpus": job_gpus,
            "mttf_hours": metrics.mttf_at_job_size_hours(rate, job_gpus),
            "predicted_ettr": metrics.predicted_ettr(job_gpus, rate, interval, restart_s),
        },
        "per_job": per_job,
    }


def _straggler_group(group: metrics.StragglerGroup) -> dict[str, Any]:
    return {
        "check": group.check,
        "metric": group.metric,
        "profile": group.profile,
        "median": group.median,
        "nodes": [
            {"node": node, "value": v.value, "robust_z": v.robust_z, "straggler": v.straggler, "reason": v.reason}
            for node, v in group.verdicts.items()
        ],
    }


def _state_over_time(nodes: list[metrics.NodeHistory], since: datetime, now: datetime) -> dict[str, Any]:
    """Nodes per state at the middle of each of TIMELINE_POINTS equal slices of the window."""
    step = (now - since) / TIMELINE_POINTS
    times = [since + step * (k + 0.5) for k in range(TIMELINE_POINTS)]
    spans = {
        h.node.name: metrics.intervals(h.node.created_at, metrics.timeline(h.node.created_at, h.transitions, now), now)
        for h in nodes
    }
    return {"times": [_iso(t) for t in times], "counts": metrics.states_at(spans, times)}


def render_html(report: dict[str, Any]) -> str:
    from jinja2 import Environment, PackageLoader, StrictUndefined, select_autoescape

    from fleetctl.durations import when
    from fleetctl.nodes.lifecycle import NodeState
    from fleetctl.reliability import svg
    from fleetctl.text import plural

    env = Environment(
        loader=PackageLoader("fleetctl.reliability", "templates"),
        undefined=StrictUndefined,
        autoescape=select_autoescape(["html", "j2"], default=True),
    )
    env.filters["num"] = lambda v, digits=1: "—" if v is None else f"{v:,.{digits}f}"
    env.filters["pct"] = lambda v, digits=2: "—" if v is None else f"{v * 100:.{digits}f}%"
    env.filters["duration"] = lambda seconds: duration(seconds, missing="—")
    env.filters["hours"] = lambda value: hours(value, missing="—")
    env.filters["ettr"] = lambda figures: ettr_text(figures["ettr"], figures["ettr_at_least"], missing="—")
    env.filters["days"] = lambda days: duration(None if days is None else days * 86400, missing="—")
    env.filters["when"] = lambda iso: when(datetime.fromisoformat(iso))
    env.filters["plural"] = plural  # `1 node`, never `1 nodes`
    states = [s.value for s in NodeState]
    timeline = report["state_over_time"]
    plots = {
        "states": svg.stacked_columns(
            [t[5:16].replace("T", " ") for t in timeline["times"]],
            [(s.replace("_", " "), state_colour(s), timeline["counts"][s]) for s in states if s in timeline["counts"]],
            "Nodes per state over the window",
        ),
        "causes": svg.bar_chart(list(report["summary"]["causes"].items()), "Failures by cause"),
        "restarts": svg.histogram(
            report["restart_latency"]["seconds"],
            "Job restart latency",
            "seconds from the fault to the job running again",
        ),
        # Profiles differ several-fold on the same metric: each strip is relative to its own median.
        "stragglers": [
            svg.strip_plot(
                [
                    (
                        g["profile"],
                        100.0,
                        [
                            (
                                n["node"],
                                _percent_of(n["value"], g["median"]),
                                n["straggler"],
                                f"{n['value']:g} ({_median_words(g['median'])})",
                            )
                            for n in g["nodes"]
                        ],
                    )
                    for g in groups
                ],
                f"{name} per profile",
                f"{name}, % of the profile's median",
            )
            for name, groups in _by_metric(report["stragglers"]).items()
        ],
    }
    return env.get_template("report.html.j2").render(
        r=report,
        plots=plots,
        states=states,
        colour=state_colour,
        definitions=definitions(report),
        lost=lost_shares(report["summary"]),
    )


def _median_words(median: float | None) -> str:
    # None: too few nodes of the profile have the metric to compare them (checks.stragglers).
    return f"median {median:g}" if median is not None else "too few nodes to compare"


def _percent_of(value: float, median: float | None) -> float:
    return value / median * 100 if median else 100.0


def _by_metric(groups: list[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    by_metric: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for g in groups:
        by_metric[f"{g['check']} {g['metric']}"].append(g)
    return dict(by_metric)


def definitions(report: dict[str, Any]) -> list[tuple[str, str]]:
    """Each figure of the report as an operator would explain it, (term, meaning). The precise
    rules, for whoever changes them, are fleetctl.reliability.metrics' docstring; these say the same in
    the fleet's words."""
    lemon = report["lemon_rule"]
    return [
        (
            "Failure",
            "a node taken out of production for a fault it showed (a GPU XID error, a failed check, a "
            "health alert, or an operator's drain for a fault), or any drain by the automation. A drain "
            "by an operator for planned work (a drain marked as maintenance, the default: "
            "reseating a cable, an upgrade, PDU work) is not a failure.",
        ),
        (
            "MTTF (mean time to failure)",
            "production node time per failure: the hours the nodes spent in "
            "production during the window, added up, divided by the failures in it.",
        ),
        (
            "MTTR (mean time to repair)",
            "how long a node that left production for a failure stayed out before it "
            "returned, on average over the returns during the window. Nodes still out "
            "do not count, nor returns from planned work.",
        ),
        (
            "Availability",
            "time in production as a share of the time the nodes were the fleet's capacity: in "
            "production, draining, in maintenance or sent to the vendor (RMA). Time before a node "
            "first entered production, in burn-in or admission checks, and after retirement "
            "is left out. What it lost is split: planned work (from a drain marked as maintenance "
            "until the node is back, or a check fails it on its way back) and faults (the rest).",
        ),
        ("Node time per state", "how long the nodes spent in each state during the window, added up over nodes."),
        (
            "Rule precision",
            "how often the automation was right to take a node out, per rule (the fault a drain "
            "was for: an XID code, a failed check, a health alert). A removal is confirmed when the "
            "node then went to the vendor (RMA) and the vendor replaced a part, "
            "or was retired, or came back to production only after "
            "a repair: a remediation runbook's GPU reset or reboot that succeeded, or a firmware "
            "update (a reset that was not needed counts as a repair too). It is unchanged when the "
            "node came back to production with nothing repaired (a recheck or burn-in passed on it as "
            "it was, or an operator put it back), or its RMA came back with no fault found: likely a false alarm. It is open while the node is still out or its "
            "RMA is not yet closed. Precision is confirmed / (confirmed + unchanged); a rule under "
            f"{metrics.USUALLY_WRONG_BELOW:.0%} over at least {metrics.USUALLY_WRONG_MIN_RESOLVED} "
            "resolved removals is marked usually wrong.",
        ),
        (
            "Lemon node",
            f"a node remediated {lemon['threshold']} times or more within "
            f"{duration(lemon['within_days'] * 86400)} (remediation runs begun or entries into maintenance to "
            "be repaired, whichever are more; a drain for planned work is none), in a span that ends "
            "during the window.",
        ),
        (
            "Job ETTR (effective training time ratio)",
            "the share of a job's time that was useful work: its wall "
            "time minus the time spent restarting after faults and the "
            "work lost since its last checkpoint. The fleet's ETTR weighs "
            "each job by its wall time. A job restarted after a fault that came before any "
            "checkpoint it reported lost work nobody measured: its ETTR is shown as a lower "
            "bound (≥), as if it had lost everything since it started or last came back, and "
            "so is the fleet's.",
        ),
        (
            "Predicted ETTR",
            "what Meta's model (Kokolis et al. 2024) expects from the fleet's failures per GPU "
            "hour, the job's GPUs, its checkpoint interval and the mean restart time: each failure "
            "costs a restart plus half a checkpoint interval of work.",
        ),
        ("MTTF at a job size", "how long a job on that many GPUs runs, on average, before one of its nodes fails."),
        (
            "Checkpoint interval",
            "the median time between a job's consecutive checkpoints, over the jobs that reported two or more.",
        ),
        ("Job restart latency", "from the moment a fault was seen to the job running again on healthy nodes."),
        (
            "Job interruptions",
            "each restart fleetctl ran, by the fault behind it (or by hand), each requeue the "
            "scheduler made on its own, and each job that ended because its node failed or it "
            "was preempted.",
        ),
        (
            "Straggler",
            "a node whose latest NCCL all-reduce bandwidth or HPL GFLOPS per GPU is far below the "
            "median of the nodes with the same GPU model. Retired nodes are left out.",
        ),
        (
            "Automation breaker",
            "the automation pauses itself when too many nodes fail, or too many checks cannot "
            "tell, at once; it resumes when an operator says so.",
        ),
    ]
