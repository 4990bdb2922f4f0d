"""`fleetctl report [--since 7d] [-o json] [--html FILE]`: the fleet's reliability over a window;
`--automation`: the shadow run of automation in dry run beside what happened."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer

from fleetctl.cli import context
from fleetctl.cli.output import EXIT_USAGE, OUTPUT_OPTION, OutputFormat, emit, fail, simple_table, within
from fleetctl.text import plural

if TYPE_CHECKING:
    from datetime import timedelta

    from rich.console import Group, RenderableType
    from rich.text import Text


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{value:.2%}"


def render_report(report: dict[str, Any], wide: bool = False) -> Group:
    """The report as rich tables: the headline numbers, per rack and profile, and the lists."""
    from rich.console import Group

    jobs = report["jobs"]
    parts: list[RenderableType] = [
        _headline(report),
        _groups("per rack", "rack", report["racks"], wide),
        _groups("per profile", "profile", report["profiles"], wide),
    ]
    if jobs["per_job"]:
        parts.append(_jobs_table(jobs["per_job"], wide))
    if jobs["interruptions"]:
        parts.append(simple_table("job interruptions", ["cause", "interruptions"], list(jobs["interruptions"].items())))
    if report["hung_jobs"]:
        parts.append(_hung_jobs_table(report["hung_jobs"]))
    if report["summary"]["causes"]:
        parts.append(simple_table("failure causes", ["cause", "failures"], list(report["summary"]["causes"].items())))
    parts.extend(_lists(report))
    return Group(*parts)


def _hung_jobs_table(found: list[dict[str, Any]]) -> RenderableType:
    """The hung-job judge's findings (fleetctl.db.hangs.finding_row), newest first."""
    return simple_table(
        "hung jobs",
        ["found", "last seen", "job", "verdict", "blamed", "evidence", "resolved"],
        [
            [
                _at(f["found_at"]),
                _at(f["last_seen_at"]),
                f["job_id"],
                f["state"],
                f"{', '.join(f['suspects'])} ({f['localised']})" if f["suspects"] else "-",
                f["evidence"],
                _at(f["resolved_at"]) if f["resolved_at"] else "open",
            ]
            for f in found
        ],
    )


def _at(iso: str) -> str:
    from datetime import datetime

    from fleetctl.durations import when

    return when(datetime.fromisoformat(iso))


def _headline(report: dict[str, Any]) -> Text:
    """The fleet, the window, and the headline figures."""
    from rich.text import Text

    from fleetctl.reliability.report import duration, ettr_text, hours, lost_shares

    s, jobs, latency, window = report["summary"], report["jobs"], report["restart_latency"], report["window"]
    planned, unplanned = lost_shares(s)
    return Text.assemble(
        ("fleet ", "bold"),
        f"{report['fleet']}  {plural(s['nodes'], 'node')}  {_at(window['since'])} to {_at(window['until'])} UTC "
        f"({duration(window['days'] * 86400)}: {window['basis']})\n",
        f"MTTF {hours(s['mttf_hours'])} production node time per failure ({plural(s['failures'], 'failure')})   "
        f"MTTR {hours(s['mttr_hours'])} ({plural(s['repairs'], 'return')})   availability {_pct(s['availability'])} "
        f"(lost {_pct(unplanned)} to faults, {_pct(planned)} to planned work)   "
        f"job ETTR {ettr_text(jobs['ettr'], jobs['ettr_at_least'])} ({plural(len(jobs['per_job']), 'job')}; "
        f"{'a lower bound: ' + jobs['ettr_unknown'] + '; ' if jobs['ettr_unknown'] else ''}"
        f"predicted {_pct(jobs['predicted_ettr'])})   "
        f"restart median {duration(latency['p50'])}, p90 {duration(latency['p90'])}, max {duration(latency['max'])} "
        f"({latency['count']}; {report['restart_placement']['on_spares']} on hot spares)\n"
        f"at {jobs['at_job_size']['gpus']:,} GPUs: MTTF {hours(jobs['at_job_size']['mttf_hours'])}, predicted ETTR "
        f"{_pct(jobs['at_job_size']['predicted_ettr'])}   checkpoint interval "
        f"{duration(jobs['checkpoint_interval_seconds'])}",
    )


def _groups(title: str, column: str, rows: dict[str, Any], wide: bool) -> RenderableType:
    """The figures per rack or per profile; wide adds each state's node time."""
    from fleetctl.reliability.report import duration, hours

    states = sorted({state for g in rows.values() for state in g["node_days"]}) if wide else ["production"]
    return simple_table(
        title,
        [column, "nodes", "MTTF", "MTTR", "avail", "failures", *[state.replace("_", " ") for state in states]],
        [
            [
                name,
                g["nodes"],
                hours(g["mttf_hours"]),
                hours(g["mttr_hours"]),
                _pct(g["availability"]),
                g["failures"],
                *[duration(g["node_days"].get(state, 0) * 86400) for state in states],
            ]
            for name, g in rows.items()
        ],
    )


def _jobs_table(per_job: list[dict[str, Any]], wide: bool) -> RenderableType:
    """Each job's ETTR; wide adds where its time went: restart downtime, work lost, each restart."""
    from fleetctl.reliability.report import duration, ettr_text, hours

    extra = ["down", "lost", "restarts took"] if wide else []
    return simple_table(
        "jobs",
        ["job", "name", "GPUs", "wall", "restarts", "ckpts", "ETTR", "predicted", *extra],
        [
            [
                j["job_id"],
                j["name"],
                j["gpus"],
                hours(j["wall_hours"]),
                j["restarts"],
                j["checkpoints"],
                ettr_text(j["ettr"], j["ettr_at_least"]),
                _pct(j["predicted_ettr"]),
                *(
                    [
                        duration(j["downtime_seconds"]),
                        duration(j["lost_seconds"], f"≤{duration(j['lost_seconds_at_most'])}"),
                        ", ".join(duration(v) for v in j["restart_seconds"]),
                    ]
                    if wide
                    else []
                ),
            ]
            for j in per_job
        ],
    )


def _lists(report: dict[str, Any]) -> list[RenderableType]:
    """The report's lists that have rows: rule precision, production stragglers, the breaker's
    events, lemon nodes, stragglers."""
    parts: list[RenderableType] = []
    if report["rule_precision"]:
        parts.append(
            simple_table(
                "rule precision",
                ["rule", "removals", "confirmed", "unchanged", "open", "precision", ""],
                [
                    [
                        r["rule"],
                        r["removals"],
                        r["confirmed"],
                        r["unchanged"],
                        r["open"],
                        _pct(r["precision"]),
                        "usually wrong" if r["usually_wrong"] else "",
                    ]
                    for r in report["rule_precision"]
                ],
            )
        )
    if report["production_stragglers"]:
        parts.append(
            simple_table(
                "stragglers in production",
                ["found", "node", "job", "status", "evidence", "detail"],
                [
                    [_at(f["found_at"]), f["node"], f["job_id"], f["status"], f["evidence"], f["detail"]]
                    for f in report["production_stragglers"]
                ],
            )
        )
    if report["breaker"]:
        parts.append(
            simple_table(
                "automation breaker",
                ["at", "event", "by", "why"],
                [[_at(e["at"]), e["kind"].replace("_", " "), e["actor"], e["reason"]] for e in report["breaker"]],
            )
        )
    if report["lemons"]:
        parts.append(
            simple_table(
                "lemon nodes",
                ["node", "rack", "profile", "times remediated (most in one lemon window)"],
                [
                    [lemon["node"], lemon["rack"], lemon["profile"], lemon["times_remediated"]]
                    for lemon in report["lemons"]
                ],
            )
        )
    if report["straggler_nodes"]:
        parts.append(
            simple_table(
                "stragglers",
                ["node", "profile", "metric", "value", "profile median", "robust z"],
                [
                    [
                        n["node"],
                        n["profile"],
                        f"{n['check']} {n['metric']}",
                        f"{n['value']:g}",
                        f"{n['median']:g}",
                        n["robust_z"],
                    ]
                    for n in report["straggler_nodes"]
                ],
            )
        )
    return parts


def _may_record_jobs(ctx: typer.Context) -> bool:
    from fleetctl.db.engine import may_write

    return may_write(context.engine(ctx), "jobs")


def report(
    ctx: typer.Context,
    since: str | None = typer.Option(
        None,
        "--since",
        help="how far back the window reaches: 30m, 12h, 7d, 1d12h (default: from the first "
        "recorded node event, at most 7d)",
    ),
    output: OutputFormat = OUTPUT_OPTION,
    html: Path | None = typer.Option(None, "--html", help="also write the report as one self-contained HTML file"),
    job_gpus: int = typer.Option(
        1024, "--job-gpus", callback=within(1, 1_000_000), help="the job size for MTTF and predicted ETTR at a size"
    ),
    sync: bool = typer.Option(True, "--sync/--no-sync", help="first reconcile the schedulers' jobs into the database"),
    automation: bool = typer.Option(
        False,
        "--automation",
        help="the shadow run instead: per node, what automation would have done in its dry run "
        "(drain, runbook, RMA) beside what operators and other tools did, and how often they agreed",
    ),
) -> None:
    """MTTF, MTTR, availability, time per state, failure causes, rule precision, lemons,
    job ETTR, restart latency and stragglers, per fleet, rack and profile."""
    from datetime import timedelta

    from rich.console import Console

    from fleetctl.db.models import utcnow
    from fleetctl.durations import parse_duration
    from fleetctl.reliability.report import default_window, render_html
    from fleetctl.reliability.report_store import build_report, first_node_event_at

    try:
        window = None if since is None else parse_duration(since)
    except ValueError as exc:
        fail(f"--since: {exc}", EXIT_USAGE)
    settings = context.settings(ctx)
    if automation:
        _shadow(ctx, window, output)
        return
    if sync and not _may_record_jobs(ctx):
        typer.echo(
            "note: jobs not synced: this database login may only read; the report has what was recorded", err=True
        )
    elif sync:
        from fleetctl.cli.job import sync_schedulers

        with Console(stderr=True).status("reconciling the schedulers' jobs..."):
            result = sync_schedulers(ctx)
        for kind, error in result.errors.items():
            typer.echo(f"warning: {kind} jobs not synced, the report has what was recorded before: {error}", err=True)
    now = utcnow()
    engine = context.engine(ctx)
    with Console(stderr=True).status("reading the fleet's history..."):
        if since is None or window is None:  # both or neither: the window is --since parsed
            start, basis = default_window(now, first_node_event_at(engine))
        else:
            start, basis = now - window, f"--since {since.strip()}"
        data = build_report(
            engine,
            start,
            now,
            fleet=settings.fleet,
            lemon_threshold=settings.lemon_threshold,
            lemon_window=timedelta(days=settings.lemon_window_days),
            job_gpus=job_gpus,
            window_basis=basis,
        )
        if html is not None:
            html.write_text(render_html(data), encoding="utf-8")
    emit(data, output, render_report)
    if html is not None:
        typer.echo(f"wrote {html}", err=True)


def _shadow(ctx: typer.Context, window: timedelta | None, output: OutputFormat) -> None:
    """`report --automation`: fleetctl.reliability.automation_shadow over the window (default 7d)."""
    from datetime import timedelta

    from fleetctl.db.models import utcnow
    from fleetctl.reliability.automation_shadow_store import build_shadow

    settings, now = context.settings(ctx), utcnow()
    start = now - (window or timedelta(days=7))
    emit(
        build_shadow(context.engine(ctx), start, now, settings.fleet, settings.automation_dry_run),
        output,
        render_shadow,
    )


def render_shadow(shadow: dict[str, Any], wide: bool = False) -> Group:
    """Each node's acts, automation's beside what happened, and the fleet's agreement."""
    from rich.console import Group
    from rich.text import Text

    def acts(rows: list[dict[str, Any]], who: str) -> str:
        return "\n".join(f"{_at(r['at'])} {r['act']}{' by ' + r[who] if who else ''}" for r in rows) or "-"

    agreed = shadow["agreement"]
    return Group(
        Text(
            f"automation {'in dry run' if shadow['dry_run'] else 'acting'}; {_at(shadow['window']['since'])} to "
            f"{_at(shadow['window']['until'])} UTC: agreed on {shadow['agreed']}, automation alone "
            f"{shadow['automation_only']}, operators and other tools alone {shadow['happened_only']} "
            f"(agreement {_pct(agreed)})"
        ),
        simple_table(
            "what automation would have done, and what happened",
            ["node", "automation would have", "evidence", "happened", "agreed"],
            [
                [
                    n["node"],
                    acts(n["would"], ""),
                    "\n".join(w["evidence"] for w in n["would"]) or "-",
                    acts(n["happened"], "by"),
                    f"{n['agreed']} of {n['agreed'] + n['automation_only'] + n['happened_only']}",
                ]
                for n in shadow["nodes"]
            ],
        ),
    )
