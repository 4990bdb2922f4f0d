"""Stragglers in production, end to end: a simulated fleet runs a job on six nodes, each node
has a DCGM exporter (tests/support/dcgm.py: a real dcgm-exporter's output, served per node),
a real Prometheus scrapes them, and the ProductionStragglers workflow judges the job's
nodes against each other. One node degrades: it is flagged at once with its evidence, stays
in production while the job runs without a checkpoint, and is drained through the capacity
guard once `fleetctl job checkpoint` records one, and the job is restarted off it at once
onto the fleet's free node; a guard that refuses holds it there, and a node back in line is
cleared, never drained."""

from __future__ import annotations

import asyncio
import json
import uuid

import pytest

from fleetctl.db import jobs as jobs_db
from fleetctl.db import queries
from fleetctl.db import stragglers as findings_db
from fleetctl.jobs.stragglers import BY_NAME, DRAIN_AT_CHECKPOINT, FLAG_ONLY, TELEMETRY
from fleetctl.sim.scheduler import SimScheduler
from fleetctl.workflows.api import DEFAULT_RUNNING_TIMEOUT_S, StragglerSweepInput, StragglerSweepResult
from fleetctl.workflows.client import request_transition
from fleetctl.workflows.definitions.stragglers import ProductionStragglers
from tests.support.cli import console
from tests.support.dcgm import DcgmExporters
from tests.support.fleet import wait_for
from tests.support.prometheus import SCRAPE_INTERVAL_S, needs_prometheus, running_prometheus, wait_for_result  # noqa: F401
from tests.support.sim_fleet import fleet_in_production
from tests.support.worker import DRAIN_LOOKS_OFTEN

pytestmark = [pytest.mark.temporal, pytest.mark.slow, pytest.mark.usefixtures("needs_prometheus")]

NODES = 6  # the job's; the fleet has one more, free, for the job's restart
WINDOW_S = 4  # each node's value is its average over the last four scrapes
# A window's samples all come from after a change within the window and a few scrapes more.
SETTLE_S = WINDOW_S + 20 * SCRAPE_INTERVAL_S


class Scene:
    """The fleet, its exporters and Prometheus, and one judging at a time."""

    def __init__(self, fleet, exporters: DcgmExporters, prometheus: str, invoke, job_id: str):
        self.fleet, self.exporters, self.prometheus, self.invoke, self.job_id = (
            fleet,
            exporters,
            prometheus,
            invoke,
            job_id,
        )

    async def judge(self) -> StragglerSweepResult:
        """One tick of the schedule. Its bound: every query's timeout, and the drains' own."""
        s = self.fleet.settings
        return await asyncio.wait_for(
            self.fleet.client.execute_workflow(
                ProductionStragglers.run,
                StragglerSweepInput(fleet=s.fleet, actor="schedule/stragglers"),
                id=f"stragglers/test-{uuid.uuid4().hex[:6]}",
                task_queue=s.task_queue,
            ),
            timeout=s.prometheus_timeout_s * len(TELEMETRY) + 60,
        )

    def degrade(self, node: str, series: str, factor: float) -> None:
        self.exporters.degrade[node] = {series: factor}

    def restore(self, node: str) -> None:
        self.exporters.degrade.pop(node, None)

    def wait_until_window_shows(
        self, metric: str, node: str, below: float | None = None, at_least: float | None = None
    ) -> None:
        """Prometheus' window for `node` holds only samples after the change (the event the
        judge needs), bounded by the window and scrapes."""
        # The judge's own query, with the window's worst (or best) sample for its average.
        expr = BY_NAME[metric].promql([node], self.fleet.settings.prometheus_node_label, WINDOW_S)
        expr = expr.replace("avg_over_time", "max_over_time" if below is not None else "min_over_time")

        def shows(result: list) -> bool:
            value = float(result[0]["value"][1]) if result else None
            return value is not None and (value < below if below is not None else value >= at_least)

        wait_for_result(self.prometheus, expr, shows, timeout_s=SETTLE_S)

    def finding(self, node: str) -> dict:
        (row,) = [f for f in self.job_show()["stragglers"] if f["node"] == node]
        return row

    def job_show(self) -> dict:
        shown = self.invoke("job", "show", self.job_id, "-o", "json")
        assert shown.exit_code == 0, shown.output
        return json.loads(shown.output)


@pytest.fixture
async def scene(make_settings, sqlite_url, tmp_path):
    settings = make_settings(sqlite_url)
    settings.straggler_window_s, settings.straggler_policy = WINDOW_S, DRAIN_AT_CHECKPOINT
    fleet = await fleet_in_production(settings, NODES + 1, **DRAIN_LOOKS_OFTEN)  # drained once its job restarts
    exporters = DcgmExporters(fleet.names)
    try:
        with running_prometheus(tmp_path, exporters.targets, job="dcgm-exporter") as prometheus:
            settings.prometheus_url = prometheus
            # Every node's exporter scraped over a whole window before the first judging.
            wait_for_result(
                prometheus,
                f"count(count_over_time(DCGM_FI_DEV_SM_CLOCK[{WINDOW_S}s]) >= {WINDOW_S - 1})",
                lambda r: bool(r) and int(r[0]["value"][1]) == len(fleet.names) * 8,
                timeout_s=SETTLE_S,
            )
            job = SimScheduler(fleet.engine).submit("llm-pretrain", NODES)
            assert job.state == "running" and sorted(job.nodes) == sorted(fleet.names[:NODES])
            with console(settings) as invoke:
                yield Scene(fleet, exporters, prometheus, invoke, job.job_id)
    finally:
        exporters.close()


async def test_a_straggler_is_flagged_at_once_and_drained_at_the_next_checkpoint(scene: Scene) -> None:
    healthy = await scene.judge()
    assert healthy.jobs == 1 and healthy.errors == [] and healthy.flagged == [] and healthy.drained == []
    assert healthy.no_evidence == []  # every metric answered for every node: judged, not assumed

    victim = scene.fleet.names[2]
    scene.degrade(victim, "DCGM_FI_PROF_NVLINK_TX_BYTES", 0.5)  # one GPU's links at half rate
    scene.wait_until_window_shows("nvlink_tx", victim, below=0.75 * 121e9)
    flagged = await scene.judge()
    assert [line.split(" ")[0] for line in flagged.flagged] == [victim], flagged
    assert flagged.drained == [] and flagged.held == [] and flagged.errors == []
    finding = scene.finding(victim)
    assert finding["status"] == "open" and finding["metric"] == "nvlink_tx" and finding["robust_z"] < -3.5
    assert finding["evidence"].startswith(
        f"nvlink_tx 60.67 GB/s (slowest GPU) vs job {scene.job_id} median 120.7 over 6"
    )
    # node show asks the node's workflow too: its own event loop, off the test's.
    shown = await asyncio.to_thread(scene.invoke, "node", "show", victim, "-o", "json")
    assert shown.exit_code == 0 and json.loads(shown.output)["stragglers"][0]["evidence"] == finding["evidence"]

    # No checkpoint yet: draining now would cost the job its work since the last one.
    waiting = await scene.judge()
    assert waiting.flagged == [] and waiting.drained == [] and waiting.held == []
    assert scene.fleet.state(victim) == "production" and scene.finding(victim)["status"] == "open"

    checkpointed = scene.invoke("job", "checkpoint", scene.job_id)
    assert checkpointed.exit_code == 0, checkpointed.output
    drained = await scene.judge()
    assert drained.drained == [victim] and drained.held == []
    event = await scene.fleet.wait_event(victim, "drain", timeout_s=60)
    assert (event.actor_kind, event.failure) == ("automation", "straggler nvlink_tx")
    assert event.cause.startswith(f"straggler nvlink_tx in job {scene.job_id}: nvlink_tx ")
    # The job is restarted off it now, from the checkpoint, not left to slow on to its end;
    # its restart is counted under the same rule. Bounded by the restart's own deadline.
    spare = scene.fleet.names[NODES]

    def restarts() -> list:
        return jobs_db.job_restarts(scene.fleet.engine, scene.job_id)

    await wait_for(
        lambda: [r.status for r in restarts()] in (["succeeded"], ["failed"]),
        DEFAULT_RUNNING_TIMEOUT_S + 60,
        "the job's restart off the straggler to end",
    )
    (restart,) = restarts()
    await scene.fleet.wait_event(victim, "drain_complete")  # the job left it: on to maintenance
    assert restart.status == "succeeded" and restart.bad_nodes == [victim], restart
    assert spare in restart.new_nodes and victim not in restart.new_nodes
    assert restart.failure == "straggler nvlink_tx"  # recorded as data: the report counts it so
    finding = scene.finding(victim)
    assert finding["status"] == "drained" and "checkpointed at" in finding["detail"]
    # The guard granted it: its grant is on record as the drain's.
    assert any(e.kind == "grant" and e.node_name == victim for e in queries.automation_events(scene.fleet.engine))
    # Drained once: the next tick has nothing left to do for it.
    after = await scene.judge()
    assert after.drained == [] and after.held == []
    # The report lists it, and counts the drain under its rule. Its window is given: the
    # default starts at the fleet's first node event, and this fleet's first is the drain.
    report = await asyncio.to_thread(scene.invoke, "report", "--no-sync", "--since", "1h", "-o", "json")
    assert report.exit_code == 0, report.output
    data = json.loads(report.output)
    assert [(f["node"], f["status"]) for f in data["production_stragglers"]] == [(victim, "drained")]
    assert [r["rule"] for r in data["rule_precision"]] == ["straggler nvlink_tx"]
    # ...and so do the tables an operator reads.
    table = scene.invoke("job", "show", scene.job_id)
    assert table.exit_code == 0 and "stragglers in production" in table.output and victim in table.output
    html = scene.fleet.settings.db_url.removeprefix("sqlite:///") + ".html"
    rendered = await asyncio.to_thread(scene.invoke, "report", "--no-sync", "--since", "1h", "--html", html)
    assert rendered.exit_code == 0 and "stragglers in production" in rendered.output, rendered.output
    with open(html, encoding="utf-8") as page:
        assert "Stragglers in production" in page.read()


async def test_a_guard_that_refuses_holds_the_straggler_and_a_node_back_in_line_is_cleared(scene: Scene) -> None:
    victim, other = scene.fleet.names[0], scene.fleet.names[1]
    scene.degrade(victim, "DCGM_FI_DEV_SM_CLOCK", 1410 / 1980)  # one GPU held at 1410 MHz
    scene.wait_until_window_shows("sm_clock", victim, below=1500)
    flagged = await scene.judge()
    assert [line.split(" ")[0] for line in flagged.flagged] == [victim] and "sm_clock 1410 MHz" in flagged.flagged[0]

    # Another node out for maintenance uses the fleet's whole budget (one of six).
    await request_transition(scene.fleet.client, other, "drain", "tester", "operator: reseat a cable")
    await scene.fleet.wait_event(other, "drain")  # draining: out of service, waiting for the job
    assert scene.invoke("job", "checkpoint", scene.job_id).exit_code == 0
    held = await scene.judge()
    assert held.held == [victim] and held.drained == []
    assert scene.fleet.state(victim) == "production"
    finding = scene.finding(victim)
    assert finding["status"] == "open" and finding["detail"].startswith(
        "held in production: the capacity guard refused"
    )

    # Back in line before the guard let it go: cleared on the evidence, and never drained.
    scene.restore(victim)
    scene.wait_until_window_shows("sm_clock", victim, at_least=1965)
    cleared = await scene.judge()
    assert [line.split(" ")[0] for line in cleared.cleared] == [victim] and cleared.held == [] and cleared.drained == []
    finding = scene.finding(victim)
    assert finding["status"] == "cleared" and finding["detail"].startswith("back in line: sm_clock 1965 MHz")
    assert scene.fleet.state(victim) == "production"
    assert not [e for e in queries.node_events(scene.fleet.engine, victim) if e.trigger == "drain"]


async def test_flag_only_flags_and_never_drains(scene: Scene) -> None:
    scene.fleet.settings.straggler_policy = FLAG_ONLY  # the worker's own settings object
    victim = scene.fleet.names[4]
    scene.degrade(victim, "DCGM_FI_DEV_GPU_TEMP", 1.3)  # one GPU 20 C hotter than its peers
    scene.wait_until_window_shows("gpu_temp", victim, at_least=75)
    flagged = await scene.judge()
    assert [line.split(" ")[0] for line in flagged.flagged] == [victim] and flagged.still_open == 1
    assert scene.invoke("job", "checkpoint", scene.job_id).exit_code == 0
    after = await scene.judge()
    assert after.policy == FLAG_ONLY and after.drained == [] and after.held == [] and after.still_open == 1
    assert scene.fleet.state(victim) == "production" and scene.finding(victim)["status"] == "open"

    # An exporter that stops sending a field: no verdict on it for that node, and the result says so.
    quiet = scene.fleet.names[0]
    scene.exporters.missing[quiet] = {"DCGM_FI_DEV_POWER_USAGE"}
    expr = BY_NAME["power"].promql([quiet], "Hostname", WINDOW_S)
    # Prometheus marks the series stale at the next scrape; the window then empties of it.
    wait_for_result(scene.prometheus, expr, lambda r: r == [], timeout_s=SETTLE_S)
    unseen = await scene.judge()
    assert unseen.no_evidence == [f"job {scene.job_id}: no evidence on power for {quiet}"] and unseen.errors == []


async def test_prometheus_away_is_an_error_never_a_pass(scene: Scene) -> None:
    victim = scene.fleet.names[3]
    scene.degrade(victim, "DCGM_FI_DEV_SM_CLOCK", 0.5)
    scene.wait_until_window_shows("sm_clock", victim, below=1500)
    assert [line.split(" ")[0] for line in (await scene.judge()).flagged] == [victim]
    scene.restore(victim)
    scene.wait_until_window_shows("sm_clock", victim, at_least=1965)
    scene.fleet.settings.prometheus_url = "http://127.0.0.1:9"  # nothing listens on discard
    away = await scene.judge()
    assert len(away.errors) == len(TELEMETRY) and all("127.0.0.1:9" in e for e in away.errors), away.errors
    assert away.cleared == [] and away.flagged == []
    assert scene.finding(victim)["status"] == "open"  # not cleared on an answer nobody gave
    assert findings_db.open_findings(scene.fleet.engine)[0].node_name == victim


async def test_the_schedule_starts_the_judge(scene: Scene) -> None:
    """`fleetctl schedule create stragglers` starts ProductionStragglers on its interval,
    with the fleet's input; its first run judges the running job."""
    name = f"stragglers-{uuid.uuid4().hex[:6]}"
    created = await asyncio.to_thread(scene.invoke, "schedule", "create", "stragglers", "--name", name, "--every", "1s")
    assert created.exit_code == 0 and "production stragglers every 1s" in created.output, created.output
    handle = scene.fleet.client.get_schedule_handle(name)
    try:
        deadline = asyncio.get_running_loop().time() + 30  # thirty intervals
        while not (described := await handle.describe()).info.recent_actions:
            assert asyncio.get_running_loop().time() < deadline, "the schedule started nothing"
            await asyncio.sleep(0.2)
        action = described.schedule.action
        assert action.workflow == "ProductionStragglers" and action.id == f"stragglers/{name}"
        started = described.info.recent_actions[0].action
        result = await asyncio.wait_for(
            scene.fleet.client.get_workflow_handle(started.workflow_id, result_type=StragglerSweepResult).result(),
            timeout=60,
        )
        assert result.jobs == 1 and result.errors == [] and result.policy == DRAIN_AT_CHECKPOINT
    finally:
        await handle.delete()
