"""A fleet three hours old, written straight into the tables: the case the report's fixed 7-day
window charted almost empty (60 points 2.8 h apart: one column here, and "no data in this
window" for a fleet under 1.4 h old).

Three nodes (g01-g03, rack y1, H100) created 3 h before `now`; each enters burn-in at
-2 h 50 min (the first recorded node event), admission at -2 h 30 min and production at -2 h.
g01 sees XID 79 at -60 min: drained by automation, maintenance, burn-in and admission, back in
production at -50 min. So, by hand: 1 failure, 1 return after 10 min (MTTR 10 min), production
node time 3 x 120 min - 10 min = 350 min (MTTF 5.83 h). One job runs on g02 and g03 from -100 min
and restarts 0.4 s after a fault at -30 min.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from sqlmodel import Session

from fleetctl.db.models import Job, JobRestart, Node, NodeEvent

NODES = ("g01", "g02", "g03")
FIRST_EVENT = timedelta(hours=2, minutes=50)  # before `now`
XID_79 = "health: XID 79: reset_gpu (critical): GPU has fallen off the bus"


def seed(engine, now: datetime) -> None:
    rows: list = []
    counter = iter(range(1_000_000))

    def move(node: str, ago: timedelta, from_state: str, to_state: str, trigger: str, failure: str = "") -> None:
        rows.append(
            NodeEvent(
                node_name=node,
                from_state=from_state,
                to_state=to_state,
                trigger=trigger,
                cause=XID_79 if failure else "",
                failure=failure,
                actor="lifecycle",
                actor_kind="automation",
                at=now - ago,
                idempotency_key=f"young-{next(counter)}",
            )
        )

    for name in NODES:
        move(name, FIRST_EVENT, "new", "burn_in", "begin_burn_in")
        move(name, timedelta(hours=2, minutes=30), "burn_in", "admission", "begin_admission")
        move(name, timedelta(hours=2), "admission", "production", "enter_production")
    move("g01", timedelta(minutes=60), "production", "draining", "drain", failure="xid 79")
    move("g01", timedelta(minutes=58), "draining", "maintenance", "drain_complete")
    move("g01", timedelta(minutes=56), "maintenance", "burn_in", "begin_burn_in")
    move("g01", timedelta(minutes=53), "burn_in", "admission", "begin_admission")
    move("g01", timedelta(minutes=50), "admission", "production", "enter_production")

    fault = now - timedelta(minutes=30)
    with Session(engine) as session:
        session.add_all(
            [
                *[
                    Node(
                        name=n,
                        address=f"sim://{n}",
                        rack="y1",
                        profile="h100-sxm",
                        scheduler="sim",
                        state="production",
                        created_at=now - timedelta(hours=3),
                    )
                    for n in NODES
                ],
                *rows,
                Job(
                    job_id="young-1",
                    scheduler="sim",
                    name="smoke",
                    state="running",
                    nodes=["g02", "g03"],
                    node_count=2,
                    submitted_at=now - timedelta(minutes=101),
                    started_at=now - timedelta(minutes=100),
                ),
                JobRestart(
                    job_id="young-1",
                    scheduler="sim",
                    bad_nodes=["g02"],
                    cause=XID_79,
                    actor="lifecycle",
                    restart_id="1",
                    fault_seen_at=fault,
                    running_at=fault + timedelta(seconds=0.4),
                    status="succeeded",
                    workflow_id="job-restart/young-1/1",
                ),
            ]
        )
        session.commit()
