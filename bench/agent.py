"""The node agent: a kernel line written -> the node drained, through `fleetctl agent`
against the same through `fleetctl node event --xid 79`, p50/p95 in one run on the same
fleet; the same with 2,000 minor Xid lines written just before the XID 79 (the flood); and the agent's CPU and memory while it follows a 1,000-lines-per-second log,
against `tail -F` following the same log (the cost of reading alone).

The fleet is simulated (scheduler none, sim:// nodes) with its worker in a process of its
own; "drained" is the node's state leaving production in the fleet database. Each flood
trial is also taken apart on the node workflow's history (server times): line written ->
XID 79's signal received, -> its record activity done, -> the drain recorded, and how many
minor events were recorded before it. Run alone: `python -m bench.agent [--full]`; the flood
trials alone, with as many single-line agent trials as their baseline: `--flood-only`."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from datetime import UTC
from pathlib import Path

from bench.fleet import REPO, cpu_seconds, dev_server, fleet_settings, fleetctl_worker, seed_fleet, settings_env
from bench.harness import RESULTS_DIR, CannotMeasure, load, machine, now_iso, rounded, rss_mib, summary, write_result

TRIALS_QUICK, TRIALS_FULL = 5, 20
FLOOD_TRIALS_QUICK, FLOOD_TRIALS_FULL = 2, 5
FLOOD = 2000  # minor Xid lines written just before the XID 79
FOLLOW_S_QUICK, FOLLOW_S_FULL = 10.0, 60.0
LINES_PER_S = 1000
POLL_S = 0.01
TRIAL_TIMEOUT_S = 60.0
FLEET = 20  # nodes in production, so the capacity guard lets one be drained
# The activity that records the drain's transition: with the node's facts since the search
# attributes were added (patch node-search-attributes), plain in older runs.
TRANSITION_ACTIVITIES = ("record_transition_with_facts", "record_transition")
# A flood trial slower than this keeps the node's and the guard's histories beside the
# results (one trial of 18.8 s among ~1 s ones could not be explained after the fact).
SLOW_FLOOD_S = 3.0
XID79 = "NVRM: Xid (PCI:0000:2b:00): 79, pid=1, name=python, GPU has fallen off the bus."


def _state(engine, node: str) -> str:
    from fleetctl.db import queries

    return queries.get_node(engine, node).state


def _kmsg(seq: int, message: str) -> str:
    usec = int(time.clock_gettime(time.CLOCK_MONOTONIC) * 1e6)
    return f"3,{seq},{usec},-;{message}\n"


def _agent(settings, node: str, kmsg: Path, spool: Path, log: Path) -> subprocess.Popen:
    with open(log, "ab") as out:
        return subprocess.Popen(
            [
                sys.executable,
                "-m",
                "fleetctl.cli.main",
                "agent",
                node,
                "--kmsg",
                str(kmsg),
                "--spool",
                str(spool),
                "--metrics-port",
                "0",
                "--sample-interval",
                "0",
            ],
            cwd=REPO,
            env=settings_env(settings),
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )


def _stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(20)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


async def _drained_after(engine, node: str, started: float) -> float:
    deadline = started + TRIAL_TIMEOUT_S
    while _state(engine, node) == "production":
        if time.monotonic() > deadline:
            raise CannotMeasure(f"{node} not drained within {TRIAL_TIMEOUT_S:.0f}s")
        await asyncio.sleep(POLL_S)
    return time.monotonic() - started


async def _flood_steps(client, node: str, written_at: float) -> dict:
    """Where a flood trial's time went, from the node workflow's history: seconds from the
    lines being written (wall clock) to the XID 79 signal's arrival, to the end of the
    activity that recorded it, to the capacity guard's answer (the end of ask_capacity_guard),
    and to the drain's transition being scheduled; and the minor events recorded before the
    XID 79 was (its place in the queue)."""
    from temporalio.api.enums.v1 import EventType

    from fleetctl.workflows.api import node_workflow_id

    history = await client.get_workflow_handle(node_workflow_id(node)).fetch_history()
    converter = client.data_converter.payload_converter
    signalled = recorded = guard_asked = guarded = drained = None
    scheduled: dict[int, list[dict]] = {}
    minors_before = 0
    for event in history.events:
        at = event.event_time.ToDatetime(UTC).timestamp()
        if at < written_at - 1.0:
            continue  # an earlier trial's
        if event.event_type == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_SIGNALED and signalled is None:
            (ev,) = converter.from_payloads(event.workflow_execution_signaled_event_attributes.input.payloads)
            if ev.get("code") == 79:
                signalled = at
        elif event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
            attrs = event.activity_task_scheduled_event_attributes
            if attrs.activity_type.name in ("record_health_events", "record_health_event"):
                (arg,) = converter.from_payloads(attrs.input.payloads)
                scheduled[event.event_id] = arg.get("events", [arg])
            elif attrs.activity_type.name == "ask_capacity_guard" and recorded is not None and guard_asked is None:
                guard_asked = event.event_id
            elif attrs.activity_type.name in TRANSITION_ACTIVITIES and recorded is not None and drained is None:
                drained = at
        elif (
            event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_COMPLETED
            and guarded is None
            and event.activity_task_completed_event_attributes.scheduled_event_id == guard_asked
        ):
            guarded = at
        elif event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_COMPLETED and recorded is None:
            events = scheduled.get(event.activity_task_completed_event_attributes.scheduled_event_id)
            if events is not None:
                if any(e.get("code") == 79 for e in events):
                    recorded = at
                else:
                    minors_before += len(events)
    if None in (signalled, recorded, guarded, drained):
        raise CannotMeasure(f"{node}: the XID 79 is missing from the history (signal, record, guard or drain)")
    return {
        "signal_s": round(signalled - written_at, 4),
        "recorded_s": round(recorded - written_at, 4),
        "guard_answered_s": round(guarded - written_at, 4),
        "drain_scheduled_s": round(drained - written_at, 4),
        "minor_recorded_before": minors_before,
    }


async def _keep_histories(client, settings, node: str, trial: int) -> list[str]:
    """The node's and its fleet's guard's histories, as `temporal workflow show -o json`
    writes them, under bench/results/agent_flood_slow/ (a later run's slow trial replaces
    them); their paths, relative to the repository."""
    from fleetctl.workflows.api import guard_id, node_workflow_id

    directory = RESULTS_DIR / "agent_flood_slow"
    directory.mkdir(parents=True, exist_ok=True)
    kept = []
    for workflow_id in (node_workflow_id(node), guard_id(settings.fleet)):
        history = await client.get_workflow_handle(workflow_id).fetch_history()
        path = directory / f"trial{trial}-{workflow_id.replace('/', '_')}.json"
        path.write_text(history.to_json())
        kept.append(str(path.relative_to(REPO)))
    return kept


async def _reaction(settings, tmp: Path, trials: int, flood_trials: int) -> tuple[dict[str, list], list[str]]:
    from sqlalchemy import update
    from sqlmodel import Session

    from bench.reaction import _back_in_production
    from fleetctl.db.engine import get_engine
    from fleetctl.db.models import Node
    from fleetctl.workflows.client import connect

    names = seed_fleet(settings, FLEET, racks=4)
    engine = get_engine(settings.db_url)
    with Session(engine) as session:
        session.exec(update(Node).values(state="production"))
        session.commit()
    client = await connect(settings)
    node, times = names[0], {"agent": [], "node_event": [], "agent_flood": [], "agent_flood_steps": []}
    ways = [w for t in range(trials) for w in ("agent", "node_event")] + ["agent_flood"] * flood_trials
    if not trials:  # --flood-only: single-line agent trials as the flood's baseline, interleaved
        ways = [w for t in range(flood_trials) for w in ("agent", "agent_flood")]
    for trial, way in enumerate(ways):
        await _back_in_production(client, settings, node)
        if way.startswith("agent"):
            kmsg, spool = tmp / f"kmsg-{trial}", tmp / f"spool-{trial}"
            kmsg.write_text(_kmsg(1, "Linux version 6.1 (bench)"))
            agent = _agent(settings, node, kmsg, spool, tmp / "agent.log")
            try:
                deadline = time.monotonic() + 60
                while not (spool / "cursor.json").exists():  # it has read the first record
                    if agent.poll() is not None or time.monotonic() > deadline:
                        raise CannotMeasure(f"the agent did not start: {(tmp / 'agent.log').read_text()[-500:]}")
                    await asyncio.sleep(0.05)
                flood = (
                    [_kmsg(2 + i, "NVRM: Xid (PCI:0000:2b:00): 13, pid=1, name=x, flood") for i in range(FLOOD)]
                    if way == "agent_flood"
                    else []
                )
                started, written_at = time.monotonic(), time.time()
                with open(kmsg, "a") as f:
                    f.write("".join(flood) + _kmsg(FLOOD + 2, XID79))
                times[way].append(await _drained_after(engine, node, started))
                if way == "agent_flood":
                    steps = await _flood_steps(client, node, written_at)
                    if times[way][-1] > SLOW_FLOOD_S:
                        steps["histories"] = await _keep_histories(client, settings, node, trial)
                    times["agent_flood_steps"].append(steps)
            finally:
                _stop(agent)
        else:
            started = time.monotonic()
            proc = subprocess.Popen(
                [sys.executable, "-m", "fleetctl.cli.main", "node", "event", node, "--xid", "79"],
                cwd=REPO,
                env=settings_env(settings),
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
            times[way].append(await _drained_after(engine, node, started))
            proc.wait(60)
    return times, names


def _follow_cost(settings, tmp: Path, seconds: float, command: list[str], log: Path) -> dict:
    """CPU share of one core and peak memory of `command` while the bench writes LINES_PER_S
    lines a second to `log` (one XID 13 line in every 500)."""
    proc = subprocess.Popen(
        command,
        cwd=REPO,
        env=settings_env(settings),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        time.sleep(2.0)  # started and caught up (Python's imports)
        cpu0, t0, seq = cpu_seconds(proc.pid), time.monotonic(), 10
        batch = LINES_PER_S // 50
        while time.monotonic() - t0 < seconds:
            lines = []
            for _ in range(batch):
                seq += 1
                text = (
                    "NVRM: Xid (PCI:0000:2b:00): 13, pid=1, name=x, bench" if seq % 500 == 0 else f"eth0: rx {seq} ok"
                )
                lines.append(_kmsg(seq, text))
            with open(log, "a") as f:
                f.write("".join(lines))
            time.sleep(max(0.0, t0 + (seq - 10) / LINES_PER_S - time.monotonic()))
        time.sleep(0.5)
        cpu = cpu_seconds(proc.pid) - cpu0
        wall = time.monotonic() - t0
        return {
            "cpu_share": round(cpu / wall, 4),
            "peak_rss_mib": rss_mib(proc.pid, peak=True),
            "lines": seq - 10,
            "seconds": round(wall, 1),
        }
    finally:
        _stop(proc)


def run_flood(full: bool) -> dict:
    """The flood trials alone, each beside a single-line trial on the same fleet."""
    with tempfile.TemporaryDirectory(prefix="bench-agent-") as tmp_name:
        tmp = Path(tmp_name)
        with dev_server(tmp) as server:
            settings = fleet_settings(f"sqlite:///{tmp / 'fleet.db'}", server.address)
            worker = fleetctl_worker(settings, tmp / "worker.log")
            try:
                times, _ = asyncio.run(_reaction(settings, tmp, 0, FLOOD_TRIALS_FULL if full else FLOOD_TRIALS_QUICK))
            finally:
                worker.stop()
    return {
        "figures": _flood_figures(times, summary(times["agent"])),
        "samples": {way: s if way.endswith("steps") else rounded(s) for way, s in times.items()},
    }


def _flood_figures(times: dict, agent: dict) -> dict:
    flood = summary(times["agent_flood"])
    return {
        f"{FLOOD}_minor_then_xid79_to_drained_agent_s": flood,
        "flood_p50_over_single_line_p50": round(flood["p50"] / agent["p50"], 2),
        "flood_steps": times["agent_flood_steps"],
    }


def run(full: bool) -> dict:
    trials = TRIALS_FULL if full else TRIALS_QUICK
    follow_s = FOLLOW_S_FULL if full else FOLLOW_S_QUICK
    with tempfile.TemporaryDirectory(prefix="bench-agent-") as tmp_name:
        tmp = Path(tmp_name)
        with dev_server(tmp) as server:
            settings = fleet_settings(f"sqlite:///{tmp / 'fleet.db'}", server.address)
            worker = fleetctl_worker(settings, tmp / "worker.log")
            try:
                times, names = asyncio.run(
                    _reaction(settings, tmp, trials, FLOOD_TRIALS_FULL if full else FLOOD_TRIALS_QUICK)
                )
                node = names[1]  # its Xid 13 lines are recorded, never drain it
                follow = {}
                for name, command, log in (
                    ("tail", ["tail", "-F", str(tmp / "tail.log")], tmp / "tail.log"),
                    (
                        "agent",
                        [
                            sys.executable,
                            "-m",
                            "fleetctl.cli.main",
                            "agent",
                            node,
                            "--kmsg",
                            str(tmp / "agent-follow.log"),
                            "--spool",
                            str(tmp / "spool-follow"),
                            "--metrics-port",
                            "0",
                            "--sample-interval",
                            "0",
                        ],
                        tmp / "agent-follow.log",
                    ),
                ):
                    log.write_text("")
                    follow[name] = _follow_cost(settings, tmp, follow_s, command, log)
            finally:
                worker.stop()
    agent, cli = summary(times["agent"]), summary(times["node_event"])
    return {
        "figures": {
            "line_to_drained_agent_s": agent,
            "line_to_drained_node_event_s": cli,
            **_flood_figures(times, agent),
            "p50_ratio_node_event_over_agent": round(cli["p50"] / agent["p50"], 2),
            "follow_1000_lines_per_s": follow,
            "agent_cpu_over_tail_cpu": round(follow["agent"]["cpu_share"] / max(follow["tail"]["cpu_share"], 1e-4), 1),
        },
        "samples": {way: s if way.endswith("steps") else rounded(s) for way, s in times.items()},
        "trials": trials,
    }


def main() -> int:
    full, flood_only = "--full" in sys.argv[1:], "--flood-only" in sys.argv[1:]
    started_at, load_before, t0 = now_iso(), load(), time.monotonic()
    measured = run_flood(full) if flood_only else run(full)
    result = {
        "benchmark": "agent-flood" if flood_only else "agent",
        "date": started_at,
        "full": full,
        "wall_s": round(time.monotonic() - t0, 1),
        "load_before": load_before,
        "load_after": load(),
        "machine": machine(),
        **measured,
    }
    path = write_result("agent_flood" if flood_only else "agent", result)
    print(json.dumps(measured["figures"], indent=1))
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
