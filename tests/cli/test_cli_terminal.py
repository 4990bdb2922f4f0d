"""The CLI as an operator's terminal shows it: each command run in tmux at 80x24
and at 60 columns against a real database, and the screen read back. Names are never cut, an
empty listing says so, and `| head` ends a command quietly."""

from __future__ import annotations

import asyncio
import io
import json
import os
import re
import shlex
import subprocess
import uuid
from datetime import timedelta

import pytest
from sqlmodel import Session

from fleetctl.db import jobs as jobs_store
from fleetctl.db import queries
from fleetctl.db import remediation as rma_store
from fleetctl.db.engine import get_engine
from fleetctl.db.models import Job, utcnow
from fleetctl.inventory.parse import NodeSpec
from tests.cli.test_cli_node_health import _check, _guard, _to_production
from tests.support.fleet import wait_for
from tests.support.terminal import COMMAND_S, FLEETCTL, Terminal, fleetctl

# Longer than `gpu-001`: names as a large fleet spells them (site, hall, rack, unit).
NAMES = [f"gpu-h100-east-r07-u{u:02d}" for u in (1, 2, 3)]
# Enough GPUs for an RMA page longer than any pipe's reader wants.
GPU_COUNT = 8
FAILING_GPU = 3


@pytest.fixture
def fleet(sqlite_url):
    """Three production nodes: one healthy, one whose check failed and whose drain the guard
    holds (the longest HEALTH there is), one unreachable; and an RMA of the second."""
    engine = get_engine(sqlite_url)
    queries.upsert_nodes(
        engine, [NodeSpec(n, f"sim://{n}", "h100-sxm", rack="rack-07", scheduler="sim") for n in NAMES]
    )
    start = utcnow() - timedelta(hours=1)
    for n in NAMES:
        _to_production(engine, n, start)
    healthy, held, unreachable = NAMES
    _check(engine, healthy, "nvidia-smi-query", "pass", start + timedelta(minutes=50))
    _check(engine, held, "nvidia-smi-query", "fail", start + timedelta(minutes=40), reason="uncorrectable ECC 2")
    for i in range(3):
        _guard(
            engine,
            held,
            "deny",
            "sweep: nvidia-smi-query: rack limit: 1 of 3 already unavailable (max 1, 33%)",
            start + timedelta(minutes=41 + i),
        )
    for i in range(3):
        _check(
            engine,
            unreachable,
            "nvidia-smi-query",
            "error",
            start + timedelta(minutes=30 + i),
            "timeout",
            f"timeout: ssh {unreachable}: Connection timed out",
        )
    with Session(engine) as session:  # a training job on the healthy node
        session.add(Job(job_id="sim-41", scheduler="sim", state="running", nodes=[healthy]))
        session.commit()
    gpus = [
        {
            "index": i,
            "name": "NVIDIA H100 80GB HBM3",
            "uuid": f"GPU-{uuid.UUID(int=i + 1)}",
            "serial": f"165492200{i:04d}",
            "bus_id": f"00000000:{0x18 + i:02X}:00.0",
            "vbios": "96.00.74.00.0D",
        }
        for i in range(GPU_COUNT)
    ]
    evidence = {
        "schema": "fleetctl.rma/1",
        "reason": "uncorrectable ECC on GPU 3",
        "opened_at": start.isoformat(),
        "node": {
            "name": held,
            "rack": "rack-07",
            "profile": "h100-sxm",
            "address": f"sim://{held}",
            "bmc_address": None,
            "scheduler": "sim",
            "labels": {},
        },
        "identity": {"gpus": gpus, "driver_version": "550.54.15", "firmware": {}},
        "failing_checks": [
            {
                "check": "nvidia-smi-query",
                "kind": "nvidia-smi",
                "status": "fail",
                "reason": "uncorrectable ECC",
                "at": start.isoformat(),
                "raw_output_excerpt": "",
                "findings": [
                    {
                        "what": "2 uncorrectable ECC errors since driver load",
                        "where": f"GPU {FAILING_GPU}",
                        "severity": "critical",
                    }
                ],
            }
        ],
        "xid_history": [],
        "remediation": [],
        "transitions": [],
    }
    rma_store.open_rma(
        engine,
        node_name=held,
        reason="uncorrectable ECC on GPU 3",
        remediation_run=None,
        evidence=evidence,
        evidence_markdown="",
        opened_by="tester@ci",
        idempotency_key=uuid.uuid4().hex,
    )
    return sqlite_url


@pytest.fixture(params=[80, 60], ids=["80x24", "60x24"])
def terminal(request):
    term = Terminal(columns=request.param, lines=24)
    yield term
    term.stop()


def rows_by_name(screen) -> dict[str, str]:
    """A listing's lines, by the first word of each."""
    return {line.split()[0]: line for line in screen.lines if line.strip()}


def test_node_list_keeps_every_name_whole(fleet, terminal) -> None:
    screen = terminal.run(fleetctl(fleet, "node", "list"))
    assert screen.exit_code == 0, screen.text
    rows = rows_by_name(screen)
    assert set(NAMES) <= set(rows), screen.text  # each name whole, at the start of its line
    assert all(len(line) <= terminal.columns for line in screen.lines), screen.text
    # The columns after NAME gave the width: one line per node still.
    assert len([line for line in screen.lines if line.strip()]) == 1 + len(NAMES), screen.text
    if terminal.columns >= 80:  # the rack whole: where an operator walks to
        assert all(" rack-07 " in rows[n] for n in NAMES), screen.text


def test_an_empty_listing_says_so_in_one_line(sqlite_url, terminal) -> None:
    get_engine(sqlite_url)
    screen = terminal.run(fleetctl(sqlite_url, "node", "list"))
    assert screen.exit_code == 0 and screen.lines == ["No nodes."], screen.text  # kubectl: "No resources found."
    screen = terminal.run(fleetctl(sqlite_url, "rma", "list"))
    assert screen.exit_code == 0 and screen.lines == ["No RMA records."], screen.text


# More rows than a pipe holds (64 KiB on Linux): `head` has gone before the listing is written.
LONG_FLEET = 2000


def piped_to_head(line: str) -> str:
    """`line | head -n 1`, its status fleetctl's (pipefail), not head's."""
    return shlex.join(["bash", "-o", "pipefail", "-c", f"{line} | head -n 1"])


def test_head_of_a_long_listing_ends_it_quietly(fleet, terminal) -> None:
    queries.upsert_nodes(
        get_engine(fleet),
        [
            NodeSpec(
                f"gpu-h100-west-r{i // 40:02d}-u{i % 40:02d}",
                f"sim://w{i}",
                "h100-sxm",
                rack=f"west-{i // 40:02d}",
                scheduler="sim",
            )
            for i in range(LONG_FLEET)
        ],
    )
    screen = terminal.run(piped_to_head(fleetctl(fleet, "node", "list")))
    assert screen.lines[0].split()[0] == "NAME" and len(screen.lines) == 1, screen.text  # quiet: no error line
    assert screen.exit_code == 0, screen.text


@pytest.mark.parametrize("command", [["rma", "show", "{rma}"], ["node", "show", NAMES[1]]])
def test_head_ends_a_command_quietly(fleet, terminal, command) -> None:
    args = [a.format(rma=fleet_rma_id(fleet)) for a in command]
    screen = terminal.run(piped_to_head(fleetctl(fleet, *args)))
    assert len(screen.lines) == 1 and "error" not in screen.text, screen.text
    assert screen.exit_code == 0, screen.text


@pytest.mark.parametrize("command", [["node", "list"], ["rma", "show", "{rma}"], ["rma", "list"]])
def test_a_closed_stdout_ends_a_command_silently_with_0(fleet, command) -> None:
    """The reader gone before the first write (what `| head` leaves once it has its lines),
    made certain: stdout is a pipe whose read end is closed before fleetctl starts."""
    read, write = os.pipe()
    os.close(read)
    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES")}
    try:
        done = subprocess.run(
            [
                FLEETCTL,
                "--db-url",
                fleet,
                "--temporal-address",
                "127.0.0.1:1",
                *[a.format(rma=fleet_rma_id(fleet)) for a in command],
            ],
            stdout=write,
            stderr=subprocess.PIPE,
            text=True,
            timeout=COMMAND_S,
            env=env,
        )
    finally:
        os.close(write)
    assert (done.returncode, done.stderr) == (0, "")


def fleet_rma_id(db_url: str) -> int:
    (record,) = rma_store.rma_records(get_engine(db_url))
    return record.id


@pytest.mark.parametrize(
    "natural, whole, available, widths",
    [
        ([10, 5, 20], [True, False, False], 40, [10, 5, 20]),  # fits: as it is
        ([10, 5, 20], [True, False, False], 30, [10, 5, 15]),  # the widest gives first
        ([10, 8, 8], [True, False, False], 20, [10, 5, 5]),  # then both, evenly
        ([10, 8, 8], [True, True, False], 20, [10, 6, 4]),  # a whole column gives after the others
        ([30, 8, 8], [True, False, False], 20, [30, 4, 4]),  # the first never: the line is longer
        ([3, 2, 2], [True, False, False], 1, [3, 2, 2]),  # nothing is cut below its floor or its width
    ],
)
def test_fit_widths(natural, whole, available, widths) -> None:
    from fleetctl.cli.output import fit_widths

    assert fit_widths(natural, whole, available, floors=[4] * len(natural)) == widths


TABLE_TIME = re.compile(r"\b\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\b")  # fleetctl.durations.when
JSON_TIME = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$")  # fleetctl.cli.output.machine_value
PLACEMENT = "island ib-a has 1 healthy free node of 2 needed: any healthy node in the fleet"


@pytest.fixture
def pending_job(fleet):
    """A simulated job waiting for nodes while a restart of it is under way."""
    engine = get_engine(fleet)
    job_id = jobs_store.add_sim_job(engine, "train-7b", node_count=64, gpus_per_node=8)
    workflow_id = f"job-restart/{job_id}/r1"
    jobs_store.record_restart_started(
        engine,
        workflow_id=workflow_id,
        job_id=job_id,
        scheduler="sim",
        bad_nodes=[NAMES[1]],
        cause="xid 79",
        actor="automation",
        restart_id=uuid.uuid4().hex,
        fault_seen_at=utcnow() - timedelta(minutes=5),
    )
    jobs_store.record_restart_step(engine, workflow_id, placement_detail=PLACEMENT)
    return job_id


def test_job_show_prints_times_as_every_table_and_says_why_it_waits(fleet, pending_job, terminal) -> None:
    screen = terminal.run(fleetctl(fleet, "job", "show", pending_job))
    assert screen.exit_code == 0, screen.text
    assert TABLE_TIME.search(screen.text), screen.text  # the restart's fault, as node list prints times
    assert "+00:00" not in screen.text and not re.search(r"\d\d:\d\d:\d\d\.\d", screen.text), screen.text
    # squeue's Reason=Resources: why it is pending, in the placement's words (wrapped, never cut).
    flat = " ".join(" ".join(screen.lines).split())
    assert "reason: Resources: restart" in flat and PLACEMENT in flat, screen.text


def test_job_json_times_are_the_nodes_format(fleet, pending_job) -> None:
    shown = json.loads(
        subprocess.run(
            [*shlex.split(fleetctl(fleet, "job", "show", pending_job, "-o", "json"))],
            capture_output=True,
            text=True,
            timeout=COMMAND_S,
            check=True,
        ).stdout
    )
    (restart,) = shown["restarts"]
    assert JSON_TIME.match(restart["fault_seen_at"]), restart
    assert shown["reason"].startswith("Resources: ")


def test_repeated_refusals_are_one_row_with_count_and_first_and_last_seen(fleet, terminal) -> None:
    engine = get_engine(fleet)
    held = NAMES[1]
    start = utcnow() - timedelta(minutes=10)
    for i in range(40):  # a sweep every 10 s, the figures in the reason moving
        _guard(
            engine,
            held,
            "deny",
            f"sweep: nvidia-smi-query: fleet limit: {i % 3 + 1} of 3 already unavailable",
            start + timedelta(seconds=10 * i),
        )
    _guard(engine, NAMES[0], "grant", "sweep: nvidia-smi-query: granted", start + timedelta(seconds=5))
    for command in (("fleet", "status"), ("node", "show", held)):
        screen = terminal.run(fleetctl(fleet, *command))
        refusals = [line for line in screen.lines if "deny" in line]
        assert len(refusals) == 2, screen.text  # the fixture's three, and these forty
        assert any(" 40 " in line for line in refusals) and any(" 3 " in line for line in refusals), screen.text
        # first and last seen of each, as kubectl's events give them: ages
        assert all(len(re.findall(r"\b\d+[smhd]\b", line)) == 2 for line in refusals), screen.text
    assert "grant" in terminal.run(fleetctl(fleet, "fleet", "status")).text  # not crowded out


RACK_LIMIT = "rack rack-07: 2 of 3 nodes out after this drain, past the automation limit"


def test_drain_names_the_jobs_on_a_busy_node_before_it_asks(fleet, terminal) -> None:
    busy, idle = NAMES[0], NAMES[2]
    screen = terminal.run("printf 'n\\n' | " + fleetctl(fleet, "node", "drain", busy, idle, "--reason", "swap optics"))
    flat = " ".join(screen.text.split())
    assert f"{busy}: 1 job running: sim-41" in flat, screen.text  # kubectl drain lists the pods it evicts
    assert RACK_LIMIT in flat and "Drain anyway?" in flat, screen.text
    assert flat.index("sim-41") < flat.index("Drain anyway?"), screen.text
    assert screen.exit_code == 1 and "error: not drained" in flat, screen.text
    engine = get_engine(fleet)
    assert {queries.get_node(engine, n).state for n in (busy, idle)} == {"production"}


def test_drain_dry_run_warns_as_the_drain_does(fleet, terminal) -> None:
    busy, idle = NAMES[0], NAMES[2]
    screen = terminal.run(fleetctl(fleet, "node", "drain", busy, idle, "--reason", "swap optics", "--dry-run"))
    flat = " ".join(screen.text.split())
    assert screen.exit_code == 0, screen.text
    assert f"{idle}: would drain: production -> draining (dry run, nothing done)" in flat, screen.text
    assert f"warning: {RACK_LIMIT}" in flat and "sim-41" in flat, screen.text


def test_one_is_singular(sqlite_url, tmp_path, terminal) -> None:
    inventory = tmp_path / "one.yaml"
    inventory.write_text(
        "nodes:\n  - {name: gpu-solo-001, address: sim://gpu-solo-001, profile: h100-sxm, rack: r1, scheduler: sim}\n"
    )
    screen = terminal.run(fleetctl(sqlite_url, "node", "import", str(inventory), "--dry-run"))
    assert "1 node valid" in screen.text and "1 nodes" not in screen.text, screen.text
    queries.upsert_nodes(
        get_engine(sqlite_url), [NodeSpec("gpu-solo-001", "sim://gpu-solo-001", "h100-sxm", rack="r1", scheduler="sim")]
    )
    screen = terminal.run(fleetctl(sqlite_url, "fleet", "status"))
    assert "fleet 1 node " in screen.text and "1 nodes" not in screen.text, screen.text


def test_rma_show_keeps_gpu_uuids_and_serials_whole_and_marks_the_failing_gpu(fleet, terminal) -> None:
    screen = terminal.run(fleetctl(fleet, "rma", "show", str(fleet_rma_id(fleet))))
    assert screen.exit_code == 0, screen.text
    words = screen.text.split()
    for i in range(GPU_COUNT):  # whole: each a word of the page, not cut at the edge
        assert f"GPU-{uuid.UUID(int=i + 1)}," in words and f"165492200{i:04d}," in words, screen.text
    (marked,) = [line for line in screen.lines if "FAILING" in line]
    assert f"GPU {FAILING_GPU} FAILING" in marked, screen.text


def test_rma_show_given_a_node_says_so_in_one_line(fleet, terminal) -> None:
    screen = terminal.run(fleetctl(fleet, "rma", "show", NAMES[1]))
    assert screen.exit_code == 2, screen.text
    assert screen.lines == [
        f"error: '{NAMES[1]}' is not an RMA id; {NAMES[1]}'s RMAs: {fleet_rma_id(fleet)} "
        f"(fleetctl rma show {fleet_rma_id(fleet)})"
    ], screen.text


def test_sim_inject_help_lists_the_fault_kinds(terminal) -> None:
    from fleetctl.sim.faults import FAULT_KINDS

    screen = terminal.run(shlex.join([FLEETCTL, "sim", "inject", "--help"]))
    assert all(kind in screen.text.replace(",", " ").split() for kind in FAULT_KINDS), screen.text


@pytest.mark.temporal
async def test_resume_automation_with_the_breaker_closed_says_so_and_records_nothing(make_settings, sqlite_url) -> None:
    from fleetctl.workflows.client import connect, ensure_capacity_guard, running_guard_status
    from fleetctl.workflows.worker import BackgroundWorker

    settings = make_settings(sqlite_url)
    term = Terminal(columns=80, lines=24)
    worker = BackgroundWorker(settings).start()
    try:
        client = await connect(settings)
        # No guard runs yet: asking to resume starts none.
        screen = await asyncio.to_thread(
            term.run, fleetctl(sqlite_url, "fleet", "resume-automation", temporal=settings)
        )
        assert screen.exit_code == 0 and "the breaker is closed; nothing to resume" in screen.text, screen.text
        assert await running_guard_status(client, settings) is None
        # A guard whose breaker is closed: nothing to resume, nothing recorded.
        await ensure_capacity_guard(client, settings)
        screen = await asyncio.to_thread(
            term.run, fleetctl(sqlite_url, "fleet", "resume-automation", temporal=settings)
        )
        assert screen.exit_code == 0 and "the breaker is closed; nothing to resume" in screen.text, screen.text
        assert "automation resumed" not in screen.text
        assert not (await running_guard_status(client, settings)).breaker_open
        assert queries.automation_events(get_engine(sqlite_url)) == []
    finally:
        worker.stop()
        term.stop()


@pytest.mark.temporal
def test_node_import_into_a_namespace_without_the_search_attributes_says_run_setup(sqlite_url, tmp_path) -> None:
    from fleetctl.connections.temporal_server import TemporalBinaryMissing, start_dev_server
    from tests.support.services import missing_service

    try:
        bare = start_dev_server(tmp_path / "bare.db", search_attributes=False)  # as a cluster before setup
    except TemporalBinaryMissing as exc:
        missing_service("the Temporal dev server", str(exc))
    term = Terminal(columns=80, lines=24)
    try:
        inventory = tmp_path / "inventory.yaml"
        inventory.write_text(
            "nodes:\n  - {name: gpu-new-001, address: sim://gpu-new-001, profile: h100-sxm, rack: r1, scheduler: sim}\n"
        )
        line = shlex.join(
            [FLEETCTL, "--db-url", sqlite_url, "--temporal-address", bare.address, "node", "import", str(inventory)]
        )
        screen = term.run(line)
        assert screen.exit_code == 1, screen.text
        assert len(screen.lines) == 1 and screen.lines[0].startswith("error: namespace default lacks fleetctl's"), (
            screen.text
        )
        assert "run `fleetctl temporal setup`" in screen.lines[0] and "RPCError" not in screen.text
        assert queries.list_nodes(get_engine(sqlite_url)) == []  # nothing written
    finally:
        term.stop()
        bare.stop()


@pytest.mark.parametrize(
    "on_path, this, cwd, shown",
    [
        ("/opt/fleet/.venv/bin/fleetctl", "/opt/fleet/.venv/bin/fleetctl", "/opt/fleet", "fleetctl"),  # PATH finds it
        ("", "/opt/fleet/.venv/bin/fleetctl", "/opt/fleet", ".venv/bin/fleetctl"),  # only in the checkout's venv
        (
            "/usr/bin/fleetctl",
            "/opt/fleet/.venv/bin/fleetctl",
            "/opt/fleet",
            ".venv/bin/fleetctl",
        ),  # PATH finds another
        ("", "/opt/fleet/.venv/bin/fleetctl", "/home/alice", "/opt/fleet/.venv/bin/fleetctl"),
        ("", "/opt/my fleet/.venv/bin/fleetctl", "/tmp", "'/opt/my fleet/.venv/bin/fleetctl'"),  # quoted for the shell
    ],
)
def test_the_demo_hint_names_the_fleetctl_another_shell_can_run(on_path, this, cwd, shown) -> None:
    from pathlib import Path

    from fleetctl.cli.demo import fleetctl_invocation

    assert fleetctl_invocation(on_path, Path(this), Path(cwd)) == shown


WATCH_INTERVAL_S = 0.5
# A frame every interval, each reading the database and trying Temporal (refused at once here):
# twenty intervals allow for a loaded machine. The first frame comes after the CLI's start.
WATCH_FRAME_S = COMMAND_S + 20 * WATCH_INTERVAL_S


def test_fleet_status_watch_at_80x24_shows_what_needs_an_operator_first_with_the_time(fleet) -> None:
    """One line per node that needs an operator (the held drain and the suspect), and a new
    XID 79's drain within the next frames, on an 80x24 screen."""
    engine = get_engine(fleet)
    _guard(engine, NAMES[2], "suspect", f"unreachable: 3 sweeps: ssh {NAMES[2]}: Connection timed out", utcnow())
    term = Terminal(columns=80, lines=24)
    try:
        term.start(fleetctl(fleet, "fleet", "status", "--watch", "--interval", str(WATCH_INTERVAL_S)))
        screen = term.wait_screen(lambda s: "needs an operator: 2 nodes" in s, WATCH_FRAME_S, "a frame")
        lines = screen.splitlines()
        assert TABLE_TIME.search(lines[0]) and lines[0].rstrip().endswith("UTC"), screen  # when it was read
        assert len([line for line in lines if line.strip()]) <= 23 and all(len(line) <= 80 for line in lines), screen
        rows = {line.split()[0]: line for line in lines if line.startswith("  ")}
        assert "drain held x3" in rows[NAMES[1]] and "suspect" in rows[NAMES[2]], screen
        first = lines[0]
        term.wait_screen(lambda s: s.splitlines()[0] != first, WATCH_FRAME_S, "the next frame, a later time")

        # An XID 79 drains the healthy node: the next frame shows it.
        node = queries.get_node(engine, NAMES[0])
        queries.record_transition(
            engine,
            node_name=NAMES[0],
            from_state="production",
            to_state="draining",
            trigger="drain",
            cause="XID 79: GPU has fallen off the bus",
            actor="agent",
            actor_kind="automation",
            workflow_id="w",
            run_id="r",
            expected_version=node.state_version,
            idempotency_key=f"watch-{uuid.uuid4().hex}",
        )
        shown = term.wait_screen(lambda s: "production>draining" in s, WATCH_FRAME_S, "the XID 79's drain")
        assert any(NAMES[0] in line and "production>draining" in line for line in shown.splitlines()), shown
    finally:
        term.stop()


# The node drains with no jobs and no runbook (it waits in maintenance): a handful of activities,
# as tests/cli/test_what_operators_see.py allows them.
DRAIN_S = 60.0


@pytest.mark.temporal
async def test_node_show_after_an_undrain_does_not_say_drained(make_settings, sqlite_url, tmp_path) -> None:
    from fleetctl.workflows.client import connect
    from fleetctl.workflows.worker import BackgroundWorker
    from tests.support.sim_fleet import make_fleet
    from tests.support.worker import start_in_production

    settings = make_settings(sqlite_url)
    settings.runbooks_dir = str(tmp_path)  # no runbook: the drained node waits in maintenance
    engine = get_engine(sqlite_url)
    term = Terminal(columns=80, lines=24)
    worker = BackgroundWorker(settings).start()
    try:
        (name,) = make_fleet(settings, 1)
        await start_in_production(await connect(settings), settings, name)
        drained = await asyncio.to_thread(
            term.run, fleetctl(sqlite_url, "node", "drain", name, "--reason", "swap optics", "--yes", temporal=settings)
        )
        assert drained.exit_code == 0, drained.text
        await wait_for(lambda: queries.get_node(engine, name).state == "maintenance", DRAIN_S, f"{name} drained")
        shown = await asyncio.to_thread(term.run, fleetctl(sqlite_url, "node", "show", name, temporal=settings))
        assert "last: drained: operator: swap optics" in shown.text, shown.text  # while it is drained
        undrained = await asyncio.to_thread(term.run, fleetctl(sqlite_url, "node", "undrain", name, temporal=settings))
        assert undrained.exit_code == 0, undrained.text
        # From maintenance (worked on, a part swapped perhaps): the admit that checks it first.
        assert f"`fleetctl node admit {name} --suite quick`" in " ".join(undrained.text.split()), undrained.text
        again = await asyncio.to_thread(term.run, fleetctl(sqlite_url, "node", "undrain", name, temporal=settings))
        assert again.exit_code == 0 and "already in production" in again.text and "hint" not in again.text
        shown = await asyncio.to_thread(term.run, fleetctl(sqlite_url, "node", "show", name, temporal=settings))
        assert "last: drained" not in shown.text, shown.text
        assert f"last: back in production (undrain by {settings.operator}" in shown.text, shown.text
    finally:
        worker.stop()
        term.stop()


@pytest.mark.temporal
async def test_the_temporal_ui_details_say_the_node_waits_for_an_operator_as_node_show_does(
    make_settings, sqlite_url, tmp_path
) -> None:
    """An XID 79 no runbook handles (none here): the node drained, waiting for an operator.
    The workflow's current details (what the Temporal UI and `temporal workflow metadata` show)
    say so in node show's words."""
    from fleetctl.workflows.api import node_workflow_id
    from fleetctl.workflows.client import connect
    from fleetctl.workflows.worker import BackgroundWorker
    from tests.production.test_search_attributes import temporal_cli
    from tests.support.sim_fleet import make_fleet
    from tests.support.worker import start_in_production

    settings = make_settings(sqlite_url)
    settings.runbooks_dir = str(tmp_path)
    term = Terminal(columns=80, lines=24)
    worker = BackgroundWorker(settings).start()
    try:
        (name,) = make_fleet(settings, 1)
        await start_in_production(await connect(settings), settings, name)
        sent = await asyncio.to_thread(
            term.run, fleetctl(sqlite_url, "node", "event", name, "--xid", "79", temporal=settings)
        )
        assert sent.exit_code == 0, sent.text

        def details() -> str:
            return temporal_cli(settings.temporal_address, "workflow", "metadata", "-w", node_workflow_id(name))

        await wait_for(lambda: WAITING in details(), DRAIN_S, "the details to say it waits for an operator")
        shown = await asyncio.to_thread(term.run, fleetctl(sqlite_url, "node", "show", name, temporal=settings))
        (last,) = [line.strip() for line in details().splitlines() if line.strip().startswith("last: ")]
        assert WAITING in last and last in " ".join(shown.text.split()), (last, shown.text)  # node show's words
    finally:
        worker.stop()
        term.stop()


WAITING = "waiting for an operator"


@pytest.mark.parametrize(
    "command",
    [
        ["node", "list"],
        ["node", "list", "-o", "wide"],
        ["rma", "list"],
        ["fleet", "status"],
        ["node", "show", NAMES[1]],
    ],
)
def test_names_are_whole_wherever_they_are_listed(fleet, terminal, command) -> None:
    """Every mention of a node is its whole name: never `gpu-h100-e…` (kubectl never cuts NAME)."""
    screen = terminal.run(fleetctl(fleet, *command))
    mentions = screen.text.count("gpu-h100-east")
    assert mentions and len(re.findall(r"gpu-h100-east-r07-u\d\d\b", screen.text)) == mentions, screen.text


@pytest.mark.parametrize(
    "natural, whole, secondary, available, widths",
    [
        ([10, 5, 5, 5], [True, True, False, False], [False, False, True, False], 40, [10, 5, 5, 5]),  # fits
        # the normal column gives to its floor first, then the secondary one is left out
        ([10, 8, 5, 8], [True, True, False, False], [False, False, True, False], 26, [10, 8, None, 4]),
        # the last secondary goes first; the one before stays while the rest fits
        ([10, 5, 4, 4], [True, True, False, False], [False, False, True, True], 23, [10, 5, 4, None]),
        # every secondary out and still too narrow: the whole columns give after all
        ([10, 8, 4], [True, True, False], [False, False, True], 14, [10, 4, None]),
        # no secondary column: as fit_widths
        ([10, 8, 8], [True, True, False], [False, False, False], 24, [10, 6, 4]),
    ],
)
def test_listing_widths_leave_out_secondary_columns_before_cutting_whole_ones(
    natural, whole, secondary, available, widths
) -> None:
    from fleetctl.cli.output import listing_widths

    assert listing_widths(natural, whole, secondary, available, floors=[4] * len(natural)) == widths


def rendered(table, width: int) -> list[str]:
    from rich.console import Console

    console = Console(width=width, record=True, file=io.StringIO(), color_system=None)
    console.print(table, crop=False)
    return [line.rstrip() for line in console.export_text().splitlines()]


def node_rows(db_url: str) -> list[dict]:
    """The rows `node list -o wide` lays out."""
    from fleetctl.nodes.view_store import node_rows as rows

    engine = get_engine(db_url)
    return rows(engine, queries.list_nodes(engine), wide=True)


@pytest.mark.parametrize("width", range(30, 131, 4))
def test_a_listing_cell_is_whole_or_ends_in_an_ellipsis_and_wide_is_never_narrower(fleet, width) -> None:
    from fleetctl.cli.node import NODE_COLUMNS
    from fleetctl.cli.output import column_table

    rows = node_rows(fleet)
    default = rendered(column_table(NODE_COLUMNS, rows), width)
    wide = rendered(column_table(NODE_COLUMNS, rows, wide=True), width)
    for view, lines, columns in (
        ("default", default, [c for c in NODE_COLUMNS if not c.wide]),
        ("wide", wide, NODE_COLUMNS),
    ):
        listed = [c for c in columns if any(c.header == h.rstrip("…") for h in lines[0].split())]
        for row in rows:
            (line,) = [ln for ln in lines if ln.startswith(row["name"] + " ")]
            for c in listed:
                text = str(getattr(c.cell(row), "plain", c.cell(row)))
                shortened = [text[:k] + "…" for k in range(1, len(text))]
                assert text in line or any(s in line for s in shortened), (view, c.header, text, "\n".join(lines))
    # -o wide lays out the default's columns at least as wide: what the default shows of a
    # cell, wide shows too (more of it, or all)
    for token in " ".join(default).split():
        assert token.rstrip("…") in " ".join(wide), (token, "\n".join(default), "\n".join(wide))


def test_a_narrow_listing_leaves_out_age_and_jobs_before_cutting_state_health_or_rack(fleet) -> None:
    from fleetctl.cli.node import NODE_COLUMNS
    from fleetctl.cli.output import column_table

    rows = node_rows(fleet)
    lines = rendered(column_table(NODE_COLUMNS, rows), 80)
    assert lines[0].split()[:4] == ["NAME", "STATE", "HEALTH", "RACK"], "\n".join(lines)
    for row in rows:
        (line,) = [ln for ln in lines if ln.startswith(row["name"] + " ")]
        assert all(f" {row[k]} " in f"{line} " for k in ("state", "health", "rack")), "\n".join(lines)
    assert "AGE" in lines[0] or "JOBS" not in lines[0], "\n".join(lines)  # the last secondary goes first
    wider = rendered(column_table(NODE_COLUMNS, rows), 200)
    assert {"AGE", "JOBS"} <= set(wider[0].split()), "\n".join(wider)  # kept where they fit


def test_a_listing_piped_from_a_terminal_is_as_wide_as_the_terminal(fleet, terminal) -> None:
    screen = terminal.run(shlex.join(["bash", "-o", "pipefail", "-c", fleetctl(fleet, "node", "list") + " | cat"]))
    assert screen.exit_code == 0, screen.text
    assert all(len(line) <= terminal.columns for line in screen.lines), screen.text
    assert set(NAMES) <= set(rows_by_name(screen)), screen.text


# Longer than any terminal: a listing piped where no terminal is (cron, a CI log).
LONG_REASON = "kernel: " + "NVRM: Xid (PCI:0000:18:00): 79, GPU has fallen off the bus. " * 8


def test_a_listing_piped_with_no_terminal_is_120_columns(fleet) -> None:
    engine = get_engine(fleet)
    _check(engine, NAMES[0], "nvidia-smi-query", "fail", utcnow(), reason=LONG_REASON)
    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES")}
    done = subprocess.run(
        [FLEETCTL, "--db-url", fleet, "node", "list"],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=COMMAND_S,
        env=env,
        start_new_session=True,  # no controlling terminal to ask either
    )
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert max(len(line) for line in lines) == 120 and "…" in done.stdout, done.stdout
    assert set(NAMES) <= {line.split()[0] for line in lines}, done.stdout


@pytest.mark.temporal
async def test_the_temporal_ui_details_say_what_a_drain_waits_for_while_it_waits(make_settings, sqlite_url) -> None:
    """A drain of a node running a job: while the drain waits for the job, the workflow's
    current details lead with it (`node show`'s activity), not with what the last item did."""
    from fleetctl.sim.scheduler import SimScheduler
    from fleetctl.workflows.api import node_workflow_id
    from fleetctl.workflows.client import connect, request_transition
    from fleetctl.workflows.worker import BackgroundWorker
    from tests.production.test_search_attributes import temporal_cli
    from tests.support.sim_fleet import make_fleet
    from tests.support.worker import start_in_production

    settings = make_settings(sqlite_url)
    engine = get_engine(sqlite_url)
    worker = BackgroundWorker(settings).start()
    try:
        (name,) = make_fleet(settings, 1)
        client = await connect(settings)
        await start_in_production(client, settings, name)
        SimScheduler(engine).submit("train", 1)  # the fleet's only node runs it
        await request_transition(client, name, "drain", "alice@desk", cause="PDU maintenance")

        def first_line() -> str:
            shown = temporal_cli(settings.temporal_address, "workflow", "metadata", "-w", node_workflow_id(name))
            return next((line.strip() for line in shown.splitlines() if line.strip().startswith("**")), "")

        await wait_for(
            lambda: first_line().startswith("**draining** since ") and first_line().endswith(": draining: jobs"),
            DRAIN_S,
            "the details to say the drain waits for its jobs",
        )
    finally:
        worker.stop()


def test_check_list_tells_nvidia_smi_q_from_nvidia_smi_query(sqlite_url, terminal) -> None:
    """Two names one of which starts the other: each row says which command it runs, whole,
    so `nvidia-smi-q` never reads as `nvidia-smi-query` cut short."""
    screen = terminal.run(fleetctl(sqlite_url, "check", "list"))
    assert screen.exit_code == 0, screen.text
    rows = rows_by_name(screen)
    assert rows["nvidia-smi-q"].split()[1:3] == ["nvidia-smi", "-q"], screen.text
    assert rows["nvidia-smi-query"].split()[1:3] == ["nvidia-smi", "--query-gpu"], screen.text
    names = [line.split()[0] for line in screen.lines[1:] if line.strip()]
    assert names == sorted(names), screen.text  # by name: the two one above the other


@pytest.mark.parametrize(
    "commands, tools",
    [
        (  # one program, one kind: the words up to the first that differs, cut at `=`
            {
                "q": (["nvidia-smi", "-q"], "nvidia-smi"),
                "query": (["nvidia-smi", "--query-gpu=index,name"], "nvidia-smi"),
            },
            {"q": "nvidia-smi -q", "query": "nvidia-smi --query-gpu"},
        ),
        (
            {"r1": (["dcgmi", "diag", "-r", "1", "-j"], "dcgm"), "r2": (["dcgmi", "diag", "-r", "2", "-j"], "dcgm")},
            {"r1": "dcgmi diag -r 1", "r2": "dcgmi diag -r 2"},
        ),
        (  # another kind: the program alone
            {"memory": (["nvidia-smi", "--query-gpu=index"], "nvidia-smi-memory"), "ib": (["ibstat"], "ib")},
            {"memory": "nvidia-smi", "ib": "ibstat"},
        ),
        ({"ports": (["ibstat"], "ib"), "also": (["ibstat"], "ib")}, {"ports": "ibstat", "also": "ibstat"}),  # alike
    ],
)
def test_check_tools(commands, tools) -> None:
    from fleetctl.cli.check import check_tools

    assert check_tools(commands) == tools
