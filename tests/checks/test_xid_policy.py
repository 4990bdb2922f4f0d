"""A site's Xid policy (checks.xid_policy, the xid_policy setting): validated whole, read by
every sender and the judge through the one severity rule (fleetctl.nodes.health), shown by
`fleetctl check xid-policy`, and a broken file stops every process that would use it in one
line, before it does anything."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from fleetctl.agent.detect import detect
from fleetctl.checks.xid_policy import CATALOG, XidPolicyError, load_xid_policy, parse_xid_policy
from fleetctl.cli.main import app
from fleetctl.nodes.health import DAY_S, event_severity, judge_health_event
from fleetctl.workflows.health_events import health_event

CLI = [sys.executable, "-m", "fleetctl.cli.main"]
# The worker reads the site's files before it asks Temporal anything; one that got past them
# fails on the unreachable address within the client's connect timeout.
WORKER_START_S = 60
SITE = """\
xid:
  79: {severity: warning}                               # demoted: the site's informed choice
  43: {drain_after: {count: 5, window_s: 3600}}         # a warning that drains after 5 in 1 h
  13: {severity: info, drain_after: {count: 3, window_s: 600}}
  185: {severity: critical}                             # not in this catalog version
signatures:
  nvswitch_sxid_nonfatal: {severity: critical}
"""
XID79 = "NVRM: Xid (PCI:0000:2b:00): 79, pid=1, name=x, GPU has fallen off the bus."
runner = CliRunner()


@pytest.fixture
def site_file(tmp_path) -> Path:
    path = tmp_path / "xid-policy.yaml"
    path.write_text(SITE)
    return path


@pytest.fixture
def site(site_file):
    return load_xid_policy(site_file)


@pytest.mark.parametrize(
    ("document", "words"),
    [
        ("- 79", "expected a mapping with xid and/or signatures"),
        ("xids: {79: {severity: info}}", "expected a mapping with xid and/or signatures"),
        ("xid: {0: {severity: info}}", "'0' is not an Xid code"),
        ("xid: {'79': {severity: info}}", "'79' is not an Xid code"),
        ("xid: {79: {severity: minor}}", "xid 79: severity 'minor' is not one of info, warning, critical"),
        ("xid: {79: {}}", "xid 79: expected a mapping with severity and/or drain_after"),
        ("xid: {79: {action: rma}}", "xid 79: expected a mapping with severity and/or drain_after"),
        ("xid: {43: {drain_after: {count: 1, window_s: 3600}}}", "drain_after.count: '1' is not a whole number"),
        ("xid: {43: {drain_after: {count: 5, window_s: 1}}}", "drain_after.window_s: '1' is outside 60..2.592e+06"),
        ("xid: {43: {drain_after: {count: 5}}}", "drain_after: expected {count: N, window_s: SECONDS}"),
        ("signatures: {no_such_fault: {severity: info}}", "'no_such_fault' is not a catalog signature"),
        (
            "signatures: {nvswitch_sxid_fatal: {drain_after: {count: 5, window_s: 3600}}}",
            "drain_after counts Xid codes only",
        ),
    ],
)
def test_a_policy_that_does_not_validate_is_refused_naming_the_rule(tmp_path, document, words) -> None:
    path = tmp_path / "policy.yaml"
    path.write_text(document)
    with pytest.raises(XidPolicyError) as refused:
        load_xid_policy(path)
    assert words in str(refused.value) and str(path) in str(refused.value)
    assert "\n" not in str(refused.value)


def test_a_missing_or_unreadable_file_is_refused_and_none_set_is_the_catalog(tmp_path) -> None:
    with pytest.raises(XidPolicyError, match="cannot read"):
        load_xid_policy(tmp_path / "absent.yaml")
    (tmp_path / "bad.yaml").write_text("xid: {79: [\n")
    with pytest.raises(XidPolicyError, match=r"bad\.yaml"):
        load_xid_policy(tmp_path / "bad.yaml")
    assert load_xid_policy(None) is CATALOG and load_xid_policy("") is CATALOG
    assert parse_xid_policy(None, "empty.yaml").xids == {}


@pytest.mark.parametrize(
    ("said", "code", "signature", "expected"),
    [
        ("", 79, "", "warning"),  # the site demoted it below the catalog's critical
        ("critical", 79, "", "critical"),  # a sender's (an operator's) word still may raise it
        ("", 185, "", "critical"),  # promoted: a code this catalog version does not know
        ("", 13, "", "info"),
        ("", None, "nvswitch_sxid_nonfatal", "critical"),  # a signature promoted
        ("", None, "nvswitch_sxid_fatal", "critical"),  # a row the site does not name: the catalog's
        ("", 48, "", "critical"),
    ],
)
def test_the_site_policy_sets_the_severity_and_a_sender_may_only_raise_it(site, said, code, signature, expected):
    assert event_severity(said, code, signature, policy=site) == expected
    assert health_event("gpu-7", "xid", code=code, severity=said, signature=signature, policy=site).severity == expected


def test_without_the_policy_the_catalog_stands() -> None:
    assert event_severity("", 79, policy=CATALOG) == "critical"
    assert event_severity("", None, "nvswitch_sxid_nonfatal", policy=CATALOG) == "warning"


NOW = 10 * DAY_S


@pytest.mark.parametrize(
    ("code", "earlier", "drains", "escalated"),
    [
        (43, [NOW - 60 * i for i in range(1, 4)], False, False),  # 4 in the hour: not yet
        (43, [NOW - 60 * i for i in range(1, 5)], True, True),  # the 5th in the hour drains
        (43, [NOW - 3600 - 60 * i for i in range(1, 5)], False, False),  # 4 before the window: only 1 in it
        (13, [NOW - 60, NOW - 120], True, True),  # an info code the site counts: 3 in 10 min
        (13, [NOW - 700, NOW - 800], False, False),
        (79, [], False, False),  # demoted: no longer at once...
        (79, [NOW - 60, NOW - 120], True, True),  # ...but a warning: the catalog's repeat rule (3 in 24 h)
        (48, [], True, False),  # untouched: critical, at once
    ],
)
def test_the_judge_counts_by_the_sites_thresholds(site, code, earlier, drains, escalated) -> None:
    verdict = judge_health_event(code, earlier, NOW, policy=site)
    assert (verdict.drain_now, verdict.escalated) == (drains, escalated)


def test_the_agent_reads_a_demoted_code_by_the_policy(site) -> None:
    """The agent's detect says the severity the event is sent with, and the critical ones it
    sends ahead of all: a demoted code is neither."""
    (fault,) = detect(XID79, site)
    assert fault.severity == "warning" and not fault.critical
    (fault,) = detect(XID79, CATALOG)
    assert fault.critical


def _check(*args: str, env: dict[str, str] | None = None):
    return runner.invoke(app, ["check", "xid-policy", *args], env={"FLEETCTL_CONFIG": os.devnull, **(env or {})})


def test_check_xid_policy_prints_the_effective_table_and_where_each_row_came_from(site_file) -> None:
    shown = _check("-o", "json", env={"FLEETCTL_XID_POLICY": str(site_file)})
    assert shown.exit_code == 0, shown.output
    rows = {(r["kind"], r["key"]): r for r in json.loads(shown.stdout)}
    assert rows["xid", "79"] | {"name": ""} == {
        "kind": "xid",
        "key": "79",
        "name": "",
        "catalog": "critical",
        "severity": "warning",
        "drains": "after 3 in 24 h",
        "source": str(site_file),
    }
    assert (rows["xid", "43"]["drains"], rows["xid", "43"]["source"]) == ("after 5 in 1 h", str(site_file))
    assert (rows["xid", "185"]["severity"], rows["xid", "185"]["catalog"]) == ("critical", "warning")
    assert rows["signature", "nvswitch_sxid_nonfatal"]["severity"] == "critical"
    assert (rows["xid", "48"]["source"], rows["xid", "48"]["drains"]) == ("catalog", "at once")
    table = _check("--file", str(site_file), env={"COLUMNS": "250"})
    assert table.exit_code == 0 and "after 5 in 1 h" in table.stdout and str(site_file) in table.stdout
    assert {r["source"] for r in json.loads(_check("-o", "json").stdout)} == {"catalog"}


def test_check_xid_policy_refuses_a_broken_file_in_one_line(tmp_path) -> None:
    path = tmp_path / "policy.yaml"
    path.write_text("xid: {79: {severity: minor}}\n")
    refused = _check(env={"FLEETCTL_XID_POLICY": str(path)})
    assert refused.exit_code == 2 and refused.stdout == ""
    assert refused.stderr.count("\n") == 1 and str(path) in refused.stderr and "'minor'" in refused.stderr


@pytest.fixture
def broken(tmp_path) -> Path:
    path = tmp_path / "policy.yaml"
    path.write_text("xid: {43: {drain_after: {count: 0, window_s: 3600}}}\n")
    return path


def _refused_in_one_line(code: int, stderr: str, path: Path) -> None:
    assert code == 2, stderr
    assert stderr.count("\n") == 1 and str(path) in stderr and "drain_after.count" in stderr, stderr
    assert "internal" not in stderr and "Traceback" not in stderr


def test_the_worker_does_not_start_on_a_broken_policy(broken, tmp_path) -> None:
    env = {
        **os.environ,
        "FLEETCTL_CONFIG": os.devnull,
        "FLEETCTL_XID_POLICY": str(broken),
        "FLEETCTL_DB_URL": f"sqlite:///{tmp_path / 'fleet.db'}",
        "TEMPORAL_ADDRESS": "127.0.0.1:1",
    }
    done = subprocess.run([*CLI, "worker"], env=env, capture_output=True, text=True, timeout=WORKER_START_S)
    _refused_in_one_line(done.returncode, done.stderr, broken)
    assert "xid_policy" in done.stderr and done.stdout == ""
    assert not (tmp_path / "fleet.db").exists()  # refused before the database is opened


def test_the_agent_does_not_start_on_a_broken_policy(broken, tmp_path) -> None:
    spool = tmp_path / "spool"
    result = runner.invoke(
        app,
        ["agent", "n1", "--file", os.devnull, "--spool", str(spool), "--metrics-port", "0"],
        env={"FLEETCTL_CONFIG": os.devnull, "FLEETCTL_XID_POLICY": str(broken)},
    )
    _refused_in_one_line(result.exit_code, result.stderr, broken)
    assert not spool.exists()  # refused before it opens its spool or reads a log


def test_an_operators_event_is_not_sent_with_a_broken_policy(broken) -> None:
    result = runner.invoke(
        app,
        ["--temporal-address", "127.0.0.1:1", "node", "event", "n1", "--xid", "79"],
        env={"FLEETCTL_CONFIG": os.devnull, "FLEETCTL_XID_POLICY": str(broken)},
    )
    _refused_in_one_line(result.exit_code, result.stderr, broken)


def test_the_intakes_parsers_read_the_policy(site) -> None:
    """The intake decides an event's severity on arrival (its queue orders by it) and signals it
    as decided: a demoted code arrives demoted, a sender's graver word still stands."""
    from fleetctl.intake.parse import from_json

    (event,) = from_json({"node": "n1", "code": 79}, 0.0, policy=site)
    assert event.severity == "warning"
    (event,) = from_json({"node": "n1", "code": 79, "severity": "critical"}, 0.0, policy=site)
    assert event.severity == "critical"
