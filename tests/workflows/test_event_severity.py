"""One criticality for every sender: a health event's severity is the catalog's for its code or
signature, or what its sender said when that is graver (fleetctl.nodes.health.event_severity,
through the one constructor workflows.health_events.health_event)."""

from __future__ import annotations

import pytest

from fleetctl.agent.coalesce import coalesce_minor
from fleetctl.checks.xid_policy import CATALOG
from fleetctl.nodes.health import catalog_severity, event_severity
from fleetctl.workflows.health_events import health_event


@pytest.mark.parametrize(
    ("said", "code", "signature", "expected"),
    [
        ("", 79, "", "critical"),  # the catalog's word when none is said
        ("warning", 79, "", "critical"),  # never less than the catalog
        ("info", 79, "", "critical"),
        ("", 13, "", "info"),
        ("critical", 13, "", "critical"),  # more than the catalog: the sender's
        ("warning", 13, "", "warning"),
        ("", 99_999, "", "warning"),  # a code NVIDIA's catalog lacks: a warning, as the catalog reads it
        ("", None, "gpu_fallen_off_bus", "critical"),  # a signature without an Xid
        ("info", None, "gpu_fallen_off_bus", "critical"),
        ("", None, "not-a-signature", ""),  # nothing the catalog knows: the sender's word, or none
        ("warning", None, "", "warning"),
        ("", None, "", ""),
        ("", 13, "gpu_fallen_off_bus", "critical"),  # code and signature: the graver
    ],
)
def test_the_severity_is_the_catalogs_or_the_senders_when_graver(said, code, signature, expected) -> None:
    assert event_severity(said, code, signature, policy=CATALOG) == expected
    assert (
        health_event("gpu-7", "xid", code=code, severity=said, signature=signature, policy=CATALOG).severity == expected
    )


def test_a_word_that_is_no_severity_is_refused() -> None:
    with pytest.raises(ValueError, match="not one of info, warning, critical"):
        health_event("gpu-7", "xid", code=79, severity="minor", policy=CATALOG)


def test_the_catalog_knows_xid79_as_critical() -> None:
    assert catalog_severity(79, policy=CATALOG) == "critical" and catalog_severity(None, policy=CATALOG) == ""


def _ev(i: int, code: int | None, severity: str, signature: str = "", source: str = "agent") -> dict:
    return {
        "node": "gpu-7",
        "source": source,
        "code": code,
        "message": f"m{i}",
        "actor": "fleetctl-agent",
        "event_id": f"e{i}",
        "at": 100.0 + i,
        "severity": severity,
        "at_from_record": True,
        "signature": signature,
    }


def test_the_agent_sends_a_batchs_repeated_minor_events_once_with_their_count() -> None:
    batch = [_ev(0, 13, "info"), _ev(1, 79, "critical"), _ev(2, 13, "info"), _ev(3, 79, "critical"), _ev(4, 13, "info")]
    sent = coalesce_minor(batch, CATALOG)
    assert [e["event_id"] for e in sent] == ["e4", "e1", "e3"]  # a fold goes under its last event's id
    assert (sent[0]["repeat_count"], sent[0]["first_seen"], sent[0]["last_seen"]) == (3, 100.0, 104.0)


@pytest.mark.parametrize(
    "batch",
    [
        [_ev(0, 79, ""), _ev(1, 79, "")],  # critical by the catalog, whatever the sender said
        [_ev(0, None, "warning"), _ev(1, None, "warning")],  # neither code nor signature: not the same fault
        [_ev(0, 13, "info"), _ev(1, 31, "info")],  # different codes
        [_ev(0, None, "", "gsp_rpc_timeout"), _ev(1, None, "", "nvlink_link_detect_failure")],
        [_ev(0, 13, "info"), _ev(1, 13, "info", source="intake")],
    ],
)
def test_the_agent_never_folds_critical_or_different_events(batch) -> None:
    assert coalesce_minor(batch, CATALOG) == batch
