"""A realistic fleet history written straight into the tables, and what it should measure.

Twelve nodes in three racks (n01-n04 r1, n05-n08 r2, n09-n12 r3), odd ones H100, even ones
A100, all created 10 days before `now` and in production 9 days before it. In the 7-day
window (168 h from `since`):

- n03: XID 79 at +24 h; drained 1 h, maintenance 4 h, burn-in 2 h, admission 1 h: back at +32 h.
- n05: active check nccl-allreduce fails at +48 h; drained 1 h, in maintenance until now.
- n07: XID 48 escalations at +10, +40 and +70 h; the first two back after 4 h each
  (draining, maintenance, burn-in, admission 1 h each), the third goes draining 1 h,
  maintenance 1 h, then to RMA at +72 h: a lemon. Its RMA is still open.
- n08: an operator drains it at +100 h to reseat a cable (not a failure), back at +103 h.
- n12: retired by an operator at +120 h.

So, by hand: production node-hours 12 * 168 - (8 + 120 + 106 + 3 + 48) = 1731; failures 5
(n03, n05, n07 x3); MTTF 346.2 h; returns from failures n03 8 h, n07 4 h twice (n08's from planned
work is no repair): MTTR 16 / 3 = 5.33 h;
draining 6 h, maintenance 128 h, burn-in 4 h, admission 3 h, rma 96 h, retired 48 h;
availability 1731 / (1731 + 6 + 128 + 96).
"""

from __future__ import annotations

from datetime import datetime, timedelta

from sqlmodel import Session

from fleetctl.db.models import AutomationEvent, CheckRun, Job, JobRestart, Node, NodeEvent, RmaRecord

WINDOW = timedelta(days=7)
PRODUCTION_HOURS = 1731.0
FAILURES = 5
EXPECTED_HOURS = {
    "production": 1731.0,
    "draining": 6.0,
    "maintenance": 128.0,
    "burn_in": 4.0,
    "admission": 3.0,
    "rma": 96.0,
    "retired": 48.0,
}
NODES = [f"n{i:02d}" for i in range(1, 13)]
# The capacity guard's refusal as it words one (fleetctl.nodes.capacity._decide).
RACK_R3_LIMIT = "rack limit: 1 of 4 in r3 already unavailable (max 1, 25%); can go once 1 node of r3 is back in service"
XID_79 = "health: XID 79: reset_gpu (critical): GPU has fallen off the bus"
XID_48 = "health: XID 48 seen 3 times in 24 h: escalated"
NCCL_FAIL = "active check quick: nccl-allreduce: busbw 310 GB/s below the floor of 360 GB/s"
# The failure the workflow records with each of these causes' drains (fleetctl.remediation.events.Event.failure).
FAILURE_OF = {XID_79: "xid 79", XID_48: "xid 48", NCCL_FAIL: "check nccl-allreduce"}
H100_BUSBW = {"n01": 480.0, "n03": 481.0, "n05": 479.0, "n07": 482.0, "n09": 480.0, "n11": 350.0}
A100_BUSBW = {"n02": 230.0, "n04": 231.0, "n06": 229.0, "n08": 230.0, "n10": 140.0, "n12": 100.0}


def rack_of(name: str) -> str:
    return f"r{(int(name[1:]) - 1) // 4 + 1}"


def profile_of(name: str) -> str:
    return "h100-sxm" if int(name[1:]) % 2 else "a100-sxm-80gb"


def seed(engine, now: datetime) -> None:
    since = now - WINDOW
    created = now - timedelta(days=10)

    def at(hours: float) -> datetime:
        return since + timedelta(hours=hours)

    rows: list = []
    states: dict[str, tuple[str, datetime]] = {}  # each node's last state and since when
    counter = iter(range(1_000_000))

    def move(
        node: str,
        when: datetime,
        from_state: str,
        to_state: str,
        trigger: str,
        cause: str = "",
        actor_kind: str = "automation",
        actor: str = "lifecycle",
    ) -> None:
        rows.append(
            NodeEvent(
                node_name=node,
                from_state=from_state,
                to_state=to_state,
                trigger=trigger,
                cause=cause,
                actor=actor,
                actor_kind=actor_kind,
                at=when,
                idempotency_key=f"ev-{next(counter)}",
                failure=FAILURE_OF.get(cause, "") if trigger == "drain" else "",
            )
        )
        states[node] = (to_state, when)

    def back_to_production(
        node: str, start: float, maintenance_h: float, burn_in_h: float, admission_h: float, cause: str
    ) -> None:
        move(node, at(start), "production", "draining", "drain", cause)
        move(node, at(start + 1), "draining", "maintenance", "drain_complete", "drained: " + cause)
        move(node, at(start + 1 + maintenance_h), "maintenance", "burn_in", "begin_burn_in", "runbook: recheck")
        move(node, at(start + 1 + maintenance_h + burn_in_h), "burn_in", "admission", "begin_admission")
        move(
            node,
            at(start + 1 + maintenance_h + burn_in_h + admission_h),
            "admission",
            "production",
            "enter_production",
            "admission: burn-in passed",
        )

    for name in NODES:
        move(name, created + timedelta(hours=1), "new", "firmware", "begin_firmware")
        move(name, created + timedelta(hours=3), "firmware", "burn_in", "begin_burn_in")
        move(name, created + timedelta(hours=12), "burn_in", "admission", "begin_admission")
        move(name, created + timedelta(hours=24), "admission", "production", "enter_production")

    back_to_production("n03", 24, 4, 2, 1, XID_79)
    move("n05", at(48), "production", "draining", "drain", NCCL_FAIL)
    move("n05", at(49), "draining", "maintenance", "drain_complete", "drained: " + NCCL_FAIL)
    back_to_production("n07", 10, 1, 1, 1, XID_48)
    back_to_production("n07", 40, 1, 1, 1, XID_48)
    move("n07", at(70), "production", "draining", "drain", XID_48)
    move("n07", at(71), "draining", "maintenance", "drain_complete", "drained: " + XID_48)
    move("n07", at(72), "maintenance", "rma", "send_to_rma", "runbook: lemon: 3 remediations in 7 days")
    move("n08", at(100), "production", "draining", "drain", "reseat the cable", "operator", "alice@console")
    move("n08", at(101), "draining", "maintenance", "drain_complete", "drained: reseat the cable")
    move("n08", at(103), "maintenance", "production", "undrain", "cable reseated", "operator", "alice@console")
    move("n12", at(120), "production", "retired", "retire", "end of life", "operator", "alice@console")

    nodes = [
        Node(
            name=n,
            address=f"sim://{n}",
            rack=rack_of(n),
            profile=profile_of(n),
            scheduler="sim",
            state=states[n][0],
            state_since=states[n][1],
            created_at=created,
        )
        for n in NODES
    ]

    checks = []
    for name, busbw in {**H100_BUSBW, **A100_BUSBW}.items():
        # An older, healthy run of n11 first: the report judges each node's latest value.
        earlier = [480.0] if name == "n11" else []
        for k, value in enumerate([*earlier, busbw]):
            finished = at(30 + k)
            checks.append(
                CheckRun(
                    node_name=name,
                    check_name="nccl-allreduce",
                    kind="nccl",
                    suite="quick",
                    status="pass" if value > 200 else "fail",
                    metrics={"busbw_gbps": value},
                    started_at=finished - timedelta(seconds=90),
                    finished_at=finished,
                    idempotency_key=f"check-{next(counter)}",
                )
            )
        checks.append(
            CheckRun(
                node_name=name,
                check_name="hpl",
                kind="hpl",
                suite="burn-in",
                status="pass",
                metrics={"gflops_per_gpu": 50000.0 if profile_of(name) == "h100-sxm" else 17000.0},
                started_at=at(31) - timedelta(seconds=600),
                finished_at=at(31),
                idempotency_key=f"check-{next(counter)}",
            )
        )

    jobs = [
        # Running through the whole window; one restart off n03, 10 min after a checkpoint.
        Job(
            job_id="sim-1",
            scheduler="sim",
            name="llm-pretrain",
            state="running",
            nodes=["n01", "n02", "n04", "n06"],
            node_count=4,
            submitted_at=since - timedelta(hours=25),
            started_at=since - timedelta(hours=24),
            last_checkpoint_at=at(24) - timedelta(minutes=10),
        ),
        # Ran 40 h; restarted off n07 in 120 s, then a restart that never ran again.
        Job(
            job_id="sim-2",
            scheduler="sim",
            name="finetune",
            state="failed",
            nodes=[],
            node_count=2,
            submitted_at=at(59),
            started_at=at(60),
            ended_at=at(100),
        ),
        Job(
            job_id="sim-0",
            scheduler="sim",
            name="before the window",
            state="completed",
            nodes=[],
            node_count=1,
            submitted_at=since - timedelta(days=2),
            started_at=since - timedelta(days=2),
            ended_at=since - timedelta(days=1),
        ),
        Job(
            job_id="sim-3",
            scheduler="sim",
            name="queued",
            state="pending",
            nodes=[],
            node_count=64,
            submitted_at=at(150),
        ),
    ]
    restarts = [
        JobRestart(
            job_id="sim-1",
            scheduler="sim",
            bad_nodes=["n03"],
            cause=XID_79,
            actor="lifecycle",
            restart_id="1",
            fault_seen_at=at(24),
            drained_at=at(24) + timedelta(seconds=5),
            requeued_at=at(24) + timedelta(seconds=10),
            running_at=at(24) + timedelta(seconds=90),
            new_nodes=["n05"],
            status="succeeded",
            workflow_id="job-restart/sim-1/1",
        ),
        JobRestart(
            job_id="sim-2",
            scheduler="sim",
            bad_nodes=["n07"],
            cause=XID_48,
            actor="lifecycle",
            restart_id="1",
            fault_seen_at=at(70),
            running_at=at(70) + timedelta(seconds=120),
            status="succeeded",
            workflow_id="job-restart/sim-2/1",
        ),
        JobRestart(
            job_id="sim-2",
            scheduler="sim",
            bad_nodes=["n09"],
            cause="operator",
            actor="alice@console",
            restart_id="2",
            fault_seen_at=at(90),
            status="failed",
            error="no healthy nodes",
            workflow_id="job-restart/sim-2/2",
        ),
    ]
    automation = [
        *[
            AutomationEvent(
                kind="grant",
                node_name=n,
                reason="granted",
                actor="lifecycle",
                at=at(k * 10),
                idempotency_key=f"auto-{next(counter)}",
            )
            for k, n in enumerate(["n03", "n05", "n07", "n07"])
        ],
        AutomationEvent(
            kind="deny",
            node_name="n09",
            reason=RACK_R3_LIMIT,
            actor="lifecycle",
            at=at(75),
            idempotency_key="auto-deny",
        ),
        AutomationEvent(
            kind="breaker_open", reason="storm: 4 of 12", actor="guard", at=at(80), idempotency_key="auto-b1"
        ),
        AutomationEvent(
            kind="breaker_closed", reason="resumed", actor="alice@console", at=at(81), idempotency_key="auto-b2"
        ),
        AutomationEvent(
            fleet="blue", kind="breaker_open", reason="storm", actor="guard", at=at(82), idempotency_key="auto-b3"
        ),
    ]
    # n07's RMA, opened by the runbook that sent it there and not yet closed: its removal is open.
    rmas = [
        RmaRecord(
            node_name="n07",
            reason="lemon: 3 remediations in 7 days",
            opened_by="runbook",
            opened_at=at(72),
            idempotency_key="rma-n07",
        )
    ]
    with Session(engine) as session:
        session.add_all([*nodes, *rows, *checks, *jobs, *restarts, *automation, *rmas])
        session.commit()
