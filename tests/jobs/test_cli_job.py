"""`fleetctl job ...` and `fleetctl reconcile` end to end with the simulated scheduler."""

from __future__ import annotations

import json

import pytest

from fleetctl.db import jobs
from fleetctl.db.engine import get_engine
from fleetctl.nodes.scheduler_sync import drain_owner
from fleetctl.schedulers.base import check_hold_reason
from fleetctl.sim.scheduler import SimScheduler
from tests.support.cli import console
from tests.support.jobs import sim_fleet

pytestmark = pytest.mark.temporal


@pytest.fixture
def cli(make_settings, sqlite_url):
    with console(make_settings(sqlite_url)) as invoke:
        invoke.engine = get_engine(sqlite_url)
        sim_fleet(invoke.engine, ["n1", "n2", "n3", "n4"])
        yield invoke


def test_submit_list_restart_and_show_a_simulated_job(cli) -> None:
    r = cli("job", "submit", "--nodes", "2", "--name", "llm-pretrain", "-o", "json")
    assert r.exit_code == 0, r.output
    job_id = json.loads(r.stdout)["job_id"]
    assert json.loads(cli("job", "list", "--node", "n1", "-o", "json").stdout) == [
        {"job_id": job_id, "name": "llm-pretrain", "scheduler": "sim", "state": "running", "nodes": ["n1", "n2"]}
    ]
    assert json.loads(cli("job", "list", "--node", "n3", "-o", "json").stdout) == []

    r = cli("job", "restart", job_id, "--bad-node", "n1", input="n\n")
    assert r.exit_code == 1 and "not restarted" in r.output
    r = cli("job", "restart", job_id, "--bad-node", "n4", "--yes")
    assert r.exit_code == 2 and "does not run on n4" in r.output
    r = cli("job", "restart", job_id, "--yes")
    assert r.exit_code == 2 and "--bad-node" in r.output  # both its nodes are healthy

    r = cli("job", "restart", job_id, "--bad-node", "n1", "--reason", "XID 79", "--yes")
    assert r.exit_code == 0, r.output
    assert f"job {job_id} running again on n2,n3" in r.stdout

    shown = json.loads(cli("job", "show", job_id, "-o", "json").stdout)
    assert (shown["state"], shown["nodes"], shown["scheduler"]) == ("running", ["n2", "n3"], "sim")
    (restart,) = shown["restarts"]
    assert shown["restart_seconds"] == restart["restart_seconds"] > 0
    assert (restart["bad_nodes"], restart["new_nodes"], restart["actor"], restart["cause"]) == (
        ["n1"],
        ["n2", "n3"],
        "alice@console",
        "XID 79",
    )
    assert restart["replacements"] == ["n3"]  # n3 took n1's place; n2 ran the job before too
    assert restart["fault_seen_at"] < restart["drained_at"] <= restart["requeued_at"] <= restart["running_at"]
    assert "XID 79" in cli("job", "show", job_id).stdout

    r = cli("job", "show", "sim-404")
    assert r.exit_code == 1 and r.stderr.startswith("error: no scheduler knows job sim-404")


def test_reconcile_reports_then_fixes_hand_drains_and_missing_drains(cli) -> None:
    sim = SimScheduler(cli.engine)
    sim_fleet(cli.engine, ["m1"], state="maintenance")
    sim_fleet(cli.engine, ["x1"], state="production", scheduler="none")  # no scheduler: not compared
    jobs.set_sim_drain(cli.engine, "n2", True, "NHC: check_hw_ib: No IB port is ACTIVE")
    jobs.set_sim_drain(cli.engine, "n4", True, "reseat the cable")  # a person's, naming no tool
    sim.drain("n3", "XID 79")  # fleetctl's, left behind though n3 is in production
    assert cli("reconcile").exit_code == 1

    r = cli("reconcile", "-o", "json")
    assert r.exit_code == 1
    report = json.loads(r.stdout)
    assert report["nodes_checked"] == 5
    assert {d["node"]: (d["difference"], d["owner"], d["action"]) for d in report["differences"]} == {
        "m1": ("not_drained", "", "drain"),
        "n2": ("drained_by_someone_else", "NHC", None),
        "n3": ("stale_fleetctl_drain", "", "resume"),
        "n4": ("drained_by_someone_else", "", None),
    }
    assert not sim.node_state("m1").drained  # reporting changes nothing

    # --fix leaves other tools' drains to them: NHC will lift its own once its check passes.
    r = cli("reconcile", "--fix", "-o", "json")
    assert r.exit_code == 1, r.output
    assert {d["node"] for d in json.loads(r.stdout)["differences"] if d["fixed"]} == {"m1", "n3"}
    assert sim.node_state("m1").owned_by_fleetctl and sim.node_state("m1").drained
    assert not sim.node_state("n3").drained
    assert sim.node_state("n2").drained and sim.node_state("n4").drained

    # Named, the tool's drains are resumed (its name compared without case); a person's never.
    r = cli("reconcile", "--fix", "--include-owner", "nhc", "-o", "json")
    assert r.exit_code == 1, r.output
    assert [(d["node"], d["fixed"]) for d in json.loads(r.stdout)["differences"]] == [("n2", True), ("n4", False)]
    assert not sim.node_state("n2").drained and sim.node_state("n4").drained

    jobs.set_sim_drain(cli.engine, "n4", False, None)
    r = cli("reconcile")
    assert r.exit_code == 0 and "5 nodes checked: fleetctl and the schedulers agree" in r.stdout


def test_reconcile_shows_a_check_hold_and_never_resumes_it_mid_check(cli) -> None:
    """A production node held for a sweep check or a recheck is drained by fleetctl on
    purpose: resumed by --fix, a job could land in the middle of its check."""
    sim = SimScheduler(cli.engine)
    sim.drain("n2", check_hold_reason("quick"))
    r = cli("reconcile", "--fix", "-o", "json")
    assert r.exit_code == 1, r.output
    (found,) = json.loads(r.stdout)["differences"]
    assert (found["node"], found["difference"], found["action"], found["fixed"]) == ("n2", "check_hold", None, False)
    assert sim.node_state("n2").drained


def test_reconcile_refuses_a_tool_name_that_no_reason_could_give(cli) -> None:
    jobs.set_sim_drain(cli.engine, "n2", True, "NHC: check_hw_ib")
    r = cli("reconcile", "--fix", "--include-owner", "NHC: x")
    assert (
        r.exit_code == 2 and r.stderr.startswith("error: --include-owner 'NHC: x'") and len(r.stderr.splitlines()) == 1
    )
    assert SimScheduler(cli.engine).node_state("n2").drained  # nothing was done


@pytest.mark.parametrize(
    ("reason", "owner"),
    [
        ("NHC: check_hw_cpuinfo: Actual CPU core count (32) != expected (64)", "NHC"),  # Node Health Check's form
        ("k8s: node is cordoned in Kubernetes", "k8s"),
        ("  slurm.conf-sync:drift", "slurm.conf-sync"),
        ("reseat the cable", ""),  # free text names no tool
        ("see ticket 42: optics", ""),  # the words before the colon are not one name
        (": nothing", ""),
        ("", ""),
        (None, ""),
    ],
)
def test_the_owner_of_a_drain_is_the_tool_its_reason_names(reason, owner) -> None:
    assert drain_owner(reason) == owner


def test_reconcile_shows_a_drain_reason_as_text(cli) -> None:
    """A reason is anyone's text: rich markup in it is printed, not obeyed; control characters
    are escaped, so a reason cannot rewrite the operator's terminal."""
    jobs.set_sim_drain(cli.engine, "n2", True, "[bold red]fine[/bold red] \x1b[2Jgone")
    r = cli("reconcile")
    assert r.exit_code == 1
    text = "".join(r.stdout.split())  # the table wraps the reason at 80 columns
    assert "[boldred]fine[/boldred]" in text and "\\x1b[2Jgone" in text
    assert "\x1b" not in r.stdout
