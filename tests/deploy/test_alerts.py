"""The alerting rules in deploy/prometheus: valid for Prometheus (promtool), and each fires on
the series the exporter serves, checked by promtool's own rule tests."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
import yaml

from tests.support.prometheus import PROMTOOL, require_prometheus

RULES = Path(__file__).resolve().parents[2] / "deploy" / "prometheus" / "fleetctl-alerts.yaml"


@pytest.fixture(autouse=True)
def _promtool() -> None:
    require_prometheus()


def test_the_rules_are_valid() -> None:
    checked = subprocess.run([PROMTOOL, "check", "rules", str(RULES)], capture_output=True, text=True, timeout=30)
    assert checked.returncode == 0, checked.stdout + checked.stderr


def test_a_stalled_node_fires_after_a_minute_and_resolves_when_it_works_again(tmp_path) -> None:
    stalled_at = 600  # the series' value: when the node stalled (seconds since the epoch, here 10 min)
    tests = {
        "rule_files": [str(RULES)],
        "evaluation_interval": "15s",
        "tests": [
            {
                "interval": "15s",
                "input_series": [
                    {
                        "series": 'fleetctl_node_stalled_since_timestamp_seconds{fleet="f1",node="gpu-7",rack="r1"}',
                        "values": f"{stalled_at}x8 stale",
                    },  # 2 min, then gone from the exporter
                ],
                "alert_rule_test": [
                    {"eval_time": "30s", "alertname": "FleetctlNodeStalled", "exp_alerts": []},  # not a minute yet
                    {
                        "eval_time": "90s",
                        "alertname": "FleetctlNodeStalled",
                        "exp_alerts": [
                            {
                                "exp_labels": {"severity": "critical", "fleet": "f1", "node": "gpu-7", "rack": "r1"},
                                "exp_annotations": {
                                    "summary": "fleetctl node gpu-7 (rack r1, fleet f1) is stalled",
                                    "description": "Its lifecycle workflow has acted on nothing since 1970-01-01 00:10:00 +0000 "
                                    "UTC: a health event on it (an XID 79 included) waits. `fleetctl node show "
                                    "gpu-7` says why; the Temporal UI shows the workflow task's failure.",
                                },
                            }
                        ],
                    },
                    # Gone from the exporter (the watcher found it working again): resolved.
                    {"eval_time": "5m", "alertname": "FleetctlNodeStalled", "exp_alerts": []},
                ],
            }
        ],
    }
    path = tmp_path / "tests.yaml"
    path.write_text(yaml.safe_dump(tests))
    done = subprocess.run([PROMTOOL, "test", "rules", str(path)], capture_output=True, text=True, timeout=30)
    assert done.returncode == 0, done.stdout + done.stderr


def test_a_node_needing_an_operator_fires_at_once_and_resolves_when_it_moves_on(tmp_path) -> None:
    stopped_at = 600  # the series' value: when the run stopped (seconds since the epoch, here 10 min)
    series = 'fleetctl_node_needs_operator_since_timestamp_seconds{fleet="f1",node="gpu-3",rack="r2",condition="RemediationFailed"}'
    tests = {
        "rule_files": [str(RULES)],
        "evaluation_interval": "15s",
        "tests": [
            {
                "interval": "15s",
                # 2 min, then gone from the exporter (run again, sent to RMA, back in production).
                "input_series": [{"series": series, "values": f"{stopped_at}x8 stale"}],
                "alert_rule_test": [
                    {
                        "eval_time": "15s",
                        "alertname": "FleetctlRunbookNeedsOperator",
                        "exp_alerts": [
                            {
                                "exp_labels": {
                                    "severity": "warning",
                                    "fleet": "f1",
                                    "node": "gpu-3",
                                    "rack": "r2",
                                    "condition": "RemediationFailed",
                                },
                                "exp_annotations": {
                                    "summary": "fleetctl node gpu-3 (rack r2, fleet f1) needs an operator: "
                                    "RemediationFailed",
                                    "description": "Its runbook run stopped on 1970-01-01 00:10:00 +0000 UTC and "
                                    "nothing will take the node further. `fleetctl runbook runs --node gpu-3` shows "
                                    "the step and why; `fleetctl node show gpu-3` what the operator can do.",
                                },
                            }
                        ],
                    },
                    {"eval_time": "5m", "alertname": "FleetctlRunbookNeedsOperator", "exp_alerts": []},
                ],
            }
        ],
    }
    path = tmp_path / "tests.yaml"
    path.write_text(yaml.safe_dump(tests))
    done = subprocess.run([PROMTOOL, "test", "rules", str(path)], capture_output=True, text=True, timeout=30)
    assert done.returncode == 0, done.stdout + done.stderr
