"""Stragglers in production, the pure part (fleetctl.jobs.stragglers): the nodes of one job
judged against each other from the DCGM exporter's series, over a real exporter's output
(tests/fixtures/dcgm/h100-node.metrics), served per node as tests/support/dcgm.py does."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from fleetctl.jobs.stragglers import (
    BY_NAME,
    IN_LINE,
    NO_EVIDENCE,
    STRAGGLER,
    TELEMETRY,
    TOO_FEW,
    BadAnswer,
    MetricVerdict,
    OpenFinding,
    check_label,
    drain_due,
    judge_job,
    parse_vector,
    reconcile,
    unjudged,
)
from tests.support.dcgm import node_telemetry

NODES = [f"gpu-{i:02d}" for i in range(6)]


def verdicts_of(result: list[MetricVerdict], metric: str) -> dict[str, str]:
    return {v.node: v.verdict for v in result if v.metric == metric}


@pytest.mark.parametrize(
    "nodes, degrade, missing, metric, expected",
    [
        # Six identical nodes: everyone in line, on every metric.
        (NODES, {}, {}, "sm_clock", dict.fromkeys(NODES, IN_LINE)),
        # One GPU of one node held at 1410 MHz: its node is the straggler (its slowest GPU speaks).
        (
            NODES,
            {"gpu-03": {"DCGM_FI_DEV_SM_CLOCK": 1410 / 1980}},
            {},
            "sm_clock",
            {**dict.fromkeys(NODES, IN_LINE), "gpu-03": STRAGGLER},
        ),
        # A link at half rate: half the NVLink throughput.
        (
            NODES,
            {"gpu-01": {"DCGM_FI_PROF_NVLINK_TX_BYTES": 0.5}},
            {},
            "nvlink_tx",
            {**dict.fromkeys(NODES, IN_LINE), "gpu-01": STRAGGLER},
        ),
        # ...which says nothing of its clocks.
        (NODES, {"gpu-01": {"DCGM_FI_PROF_NVLINK_TX_BYTES": 0.5}}, {}, "sm_clock", dict.fromkeys(NODES, IN_LINE)),
        # Temperature: lower is better, a node 20% hotter is the straggler.
        (
            NODES,
            {"gpu-05": {"DCGM_FI_DEV_GPU_TEMP": 1.2}},
            {},
            "gpu_temp",
            {**dict.fromkeys(NODES, IN_LINE), "gpu-05": STRAGGLER},
        ),
        # Better than its peers is not a straggler: the direction is data.
        (NODES, {"gpu-05": {"DCGM_FI_DEV_GPU_TEMP": 0.7}}, {}, "gpu_temp", dict.fromkeys(NODES, IN_LINE)),
        (
            NODES,
            {"gpu-02": {"DCGM_FI_PROF_PCIE_RX_BYTES": 0.4}},
            {},
            "pcie_rx",
            {**dict.fromkeys(NODES, IN_LINE), "gpu-02": STRAGGLER},
        ),
        # Four nodes cannot be compared (five needed): nobody flagged, however slow.
        (NODES[:4], {"gpu-03": {"DCGM_FI_DEV_SM_CLOCK": 0.5}}, {}, "sm_clock", dict.fromkeys(NODES[:4], TOO_FEW)),
        # A node without the series has no verdict on it (never a pass); the others are judged.
        (
            NODES,
            {"gpu-03": {"DCGM_FI_DEV_SM_CLOCK": 0.5}},
            {"gpu-04": "DCGM_FI_DEV_SM_CLOCK"},
            "sm_clock",
            {**dict.fromkeys(NODES, IN_LINE), "gpu-03": STRAGGLER, "gpu-04": NO_EVIDENCE},
        ),
        # Two of six without it: four left, too few to compare; the two have no evidence.
        (
            NODES,
            {},
            {"gpu-04": "DCGM_FI_DEV_SM_CLOCK", "gpu-05": "DCGM_FI_DEV_SM_CLOCK"},
            "sm_clock",
            {**dict.fromkeys(NODES[:4], TOO_FEW), "gpu-04": NO_EVIDENCE, "gpu-05": NO_EVIDENCE},
        ),
    ],
)
def test_judge_job(nodes, degrade, missing, metric, expected) -> None:
    telemetry = node_telemetry(nodes, degrade, missing)
    result = judge_job("job-7", nodes, telemetry, threshold=3.5, min_nodes=5)
    assert verdicts_of(result, metric) == expected


def test_throttle_reasons_count_only_slowdown_bits() -> None:
    """The fixture's GPUs report 4 (software power cap) or 0: no slowdown anywhere. A node
    whose GPU spends half the window in HW slowdown (0x8) is the straggler; the fraction
    comes from Prometheus (tests/jobs/test_production_stragglers.py), here from a table."""
    values = dict.fromkeys(NODES, 0.0) | {"gpu-02": 0.5}
    result = judge_job("job-7", NODES, {"throttled": values}, threshold=3.5, min_nodes=5)
    assert verdicts_of(result, "throttled") == {**dict.fromkeys(NODES, IN_LINE), "gpu-02": STRAGGLER}
    # A sample or two of slowdown in the window is within the floor of the spread (2%).
    values = dict.fromkeys(NODES, 0.0) | {"gpu-02": 0.05}
    assert STRAGGLER not in verdicts_of(judge_job("j", NODES, {"throttled": values}, 3.5, 5), "throttled").values()


def test_evidence_names_the_metric_its_value_the_median_and_the_robust_z() -> None:
    telemetry = node_telemetry(NODES, {"gpu-03": {"DCGM_FI_DEV_SM_CLOCK": 1410 / 1980}}, {})
    (flagged,) = [v for v in judge_job("job-7", NODES, telemetry, 3.5, 5) if v.verdict == STRAGGLER]
    assert (flagged.node, flagged.metric, flagged.value, flagged.median) == ("gpu-03", "sm_clock", 1410, 1965)
    assert flagged.robust_z < -3.5
    assert flagged.evidence.startswith(
        "sm_clock 1410 MHz (slowest GPU) vs job job-7 median 1965 over 6 nodes, robust z -"
    )
    too_few = judge_job("job-8", NODES[:4], node_telemetry(NODES[:4], {}, {}), 3.5, 5)
    assert "only 4 of its 4 nodes report sm_clock, need 5 to compare them; nobody flagged" in too_few[0].evidence
    missing = judge_job("job-8", NODES, node_telemetry(NODES, {}, {"gpu-00": "DCGM_FI_DEV_SM_CLOCK"}), 3.5, 5)
    assert missing[0].evidence == "no evidence: no DCGM_FI_DEV_SM_CLOCK series for gpu-00 in the window"


@pytest.mark.parametrize(
    "nodes, missing, expected",
    [
        (NODES, {}, []),
        (NODES, {"gpu-04": "DCGM_FI_DEV_SM_CLOCK"}, ["job j: no evidence on sm_clock for gpu-04"]),
        (
            NODES,
            dict.fromkeys(NODES[:4], "DCGM_FI_PROF_PCIE_TX_BYTES"),
            ["job j: only 2 of its 6 nodes report pcie_tx, need 5 to compare them; nobody flagged"],
        ),
        (
            NODES,
            dict.fromkeys(NODES, "DCGM_FI_DEV_POWER_USAGE"),
            ["job j: no evidence on power for gpu-00, gpu-01, gpu-02 and 3 more"],
        ),
    ],
)
def test_unjudged_says_what_was_not_seen(nodes, missing, expected) -> None:
    assert unjudged("j", judge_job("j", nodes, node_telemetry(nodes, {}, missing), 3.5, 5)) == expected


def test_promql_asks_for_each_nodes_slowest_gpu_by_the_hostname_label() -> None:
    nodes = ["a.example", "b"]
    assert BY_NAME["sm_clock"].promql(nodes, "Hostname", 300) == (
        'min by (Hostname) (avg_over_time({__name__=~"DCGM_FI_DEV_SM_CLOCK", Hostname=~"a\\\\.example|b"}[300s]))'
    )
    assert BY_NAME["gpu_temp"].promql(nodes, "node", 60).startswith("max by (node) (avg_over_time(")
    throttled = BY_NAME["throttled"].promql(nodes, "Hostname", 300)
    assert "DCGM_FI_DEV_CLOCK_THROTTLE_REASONS|DCGM_FI_DEV_CLOCKS_EVENT_REASONS" in throttled
    assert throttled.endswith("> bool 0)[300s:10s]))")
    assert {t.name for t in TELEMETRY} >= {"sm_clock", "power", "gpu_temp", "nvlink_tx", "pcie_tx", "throttled"}


@pytest.mark.parametrize(
    "label, ok",
    [
        ("Hostname", True),
        ("node", True),
        ("__name__", False),
        ("a-b", False),
        ("1x", False),
        ('x"}', False),
        ("", False),
    ],
)
def test_check_label(label, ok) -> None:
    if ok:
        assert check_label(label) == label
    else:
        with pytest.raises(ValueError):
            check_label(label)


def vector(*samples) -> dict:
    return {"status": "success", "data": {"resultType": "vector", "result": list(samples)}}


def sample(host, value) -> dict:
    return {"metric": {"Hostname": host}, "value": [1764590000.0, value]}


@pytest.mark.parametrize(
    "body, expected",
    [
        (vector(sample("a", "1980"), sample("b", "1410.5")), {"a": 1980.0, "b": 1410.5}),
        (vector(), {}),  # no series at all: every node without evidence (the judge says so)
        (vector(sample("a", "NaN"), sample("b", "3")), {"b": 3.0}),  # NaN is no evidence
        ({"status": "error", "errorType": "bad_data", "error": "parse error"}, "did not answer success"),
        ({"status": "success", "data": {"resultType": "matrix", "result": []}}, "not an instant vector"),
        (vector({"metric": {}, "value": [1, "3"]}), "without its Hostname label"),
        (vector(sample("a", "1"), sample("a", "2")), "two samples for one node"),
        (vector(sample("a", "fast")), "is not a number"),
        (vector({"metric": {"Hostname": "a"}, "value": 3}), r"without a \[time, value\] pair"),
        ("<html>login</html>", "did not answer success"),
        ([], "did not answer success"),
    ],
)
def test_parse_vector(body, expected) -> None:
    if isinstance(expected, dict):
        assert parse_vector(body, "Hostname") == expected
    else:
        with pytest.raises(BadAnswer, match=expected):
            parse_vector(body, "Hostname")


def v(node, metric, verdict) -> MetricVerdict:
    return MetricVerdict(node, metric, verdict, 1.0, 1.0, 0.0, "")


@pytest.mark.parametrize(
    "open_findings, verdicts, new, cleared",
    [
        ([], [v("a", "sm_clock", STRAGGLER), v("b", "sm_clock", IN_LINE)], [("a", "sm_clock")], []),
        # Still a straggler: the open finding stands, nothing new.
        ([OpenFinding(1, "j", "a", "sm_clock")], [v("a", "sm_clock", STRAGGLER)], [], []),
        # Back in line: cleared.
        ([OpenFinding(1, "j", "a", "sm_clock")], [v("a", "sm_clock", IN_LINE)], [], [1]),
        # Nothing seen (no series, too few nodes): not cleared on no evidence.
        ([OpenFinding(1, "j", "a", "sm_clock")], [v("a", "sm_clock", NO_EVIDENCE)], [], []),
        ([OpenFinding(1, "j", "a", "sm_clock")], [v("a", "sm_clock", TOO_FEW)], [], []),
        # Another job's finding is that job's.
        ([OpenFinding(1, "other", "a", "sm_clock")], [v("a", "sm_clock", STRAGGLER)], [("a", "sm_clock")], []),
        # Another metric of the same node is its own finding.
        (
            [OpenFinding(1, "j", "a", "power")],
            [v("a", "sm_clock", STRAGGLER), v("a", "power", IN_LINE)],
            [("a", "sm_clock")],
            [1],
        ),
    ],
)
def test_reconcile(open_findings, verdicts, new, cleared) -> None:
    got_new, got_cleared = reconcile("j", open_findings, verdicts)
    assert [(x.node, x.metric) for x in got_new] == new
    assert [i for i, _ in got_cleared] == cleared


FOUND = datetime(2026, 12, 1, 10, 0, tzinfo=UTC)


@pytest.mark.parametrize(
    "restarts_then, state, checkpoint, restarts_now, due",
    [
        (0, "running", None, 0, None),
        (0, "running", FOUND - timedelta(minutes=5), 0, None),  # the checkpoint before the finding
        (0, "running", FOUND, 0, None),
        (0, "running", FOUND + timedelta(seconds=1), 0, "checkpointed at 2026-12-01T10:00:01+00:00, after the finding"),
        (1, "running", None, 2, "restarted since the finding"),
        (1, "running", None, 1, None),
        (0, "completed", None, 0, "no longer running (completed)"),
        (0, "gone", None, 0, "no longer running (gone)"),
    ],
)
def test_drain_due(restarts_then, state, checkpoint, restarts_now, due) -> None:
    why = drain_due(FOUND, restarts_then, state, checkpoint, restarts_now)
    assert (why is None) if due is None else (due in why)
