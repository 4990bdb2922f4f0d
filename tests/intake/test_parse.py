"""Bodies in, events out; anything wrong refuses the whole body (nothing half-accepted)."""

from __future__ import annotations

import json
from datetime import UTC, datetime

import pytest

from fleetctl.agent.detect import detect
from fleetctl.checks.xid_policy import CATALOG
from fleetctl.intake.parse import (
    MAX_CODE,
    MAX_DEPTH,
    MAX_EVENTS,
    BadBody,
    from_alertmanager,
    from_json,
    from_node_conditions,
    loads,
)
from fleetctl.text import MAX_TEXT
from tests.conftest import FIXTURES

WEBHOOK = json.loads((FIXTURES / "intake" / "alertmanager_dcgm_xid.json").read_text())


def test_a_dcgm_xid_alert_becomes_one_event_and_a_resolved_one_none() -> None:
    (ev,) = from_alertmanager(WEBHOOK)
    assert (ev.node, ev.code, ev.source) == ("gpu-node-07", 79, "alertmanager")
    assert "Xid 79" in ev.message and ev.at == pytest.approx(
        datetime(2026, 11, 30, 20, 1, 2, 123456, UTC).timestamp(), abs=1e-6
    )
    assert from_alertmanager(WEBHOOK)[0].event_id == ev.event_id  # re-notification: the same id


def test_an_instance_label_names_the_host_without_its_port() -> None:
    body = json.loads(json.dumps(WEBHOOK))
    del body["alerts"][0]["labels"]["Hostname"]
    assert from_alertmanager(body)[0].node == "10.0.0.7"


@pytest.mark.parametrize(
    "mutate, words",
    [
        (lambda b: b.update(version="3"), "not an Alertmanager webhook"),
        (lambda b: b["alerts"][0].update(labels={"alertname": "x"}), "no node label"),
        (lambda b: b["alerts"][0]["labels"].update(Hostname="bad name;rm -rf"), "not a node name"),
        (lambda b: b["alerts"][0]["annotations"].update(value=str(MAX_CODE + 1)), "integer from 0"),
        (lambda b: b["alerts"][0]["annotations"].update(value="-3"), "integer from 0"),
        (lambda b: b["alerts"][0].update(startsAt="yesterday"), "RFC 3339"),
        (lambda b: b.update(alerts=[b["alerts"][0]] * (MAX_EVENTS + 1)), "more than"),
    ],
)
def test_a_bad_webhook_is_refused_whole(mutate, words) -> None:
    body = json.loads(json.dumps(WEBHOOK))
    mutate(body)
    with pytest.raises(BadBody, match=words):
        from_alertmanager(body)


def test_plain_json_events_with_and_without_ids() -> None:
    evs = from_json(
        {"events": [{"node": "n1", "code": 79, "id": "a"}, {"node": "n2", "message": "fan", "at": 5}]}, 100.0
    )
    assert [(e.node, e.code, e.at) for e in evs] == [("n1", 79, 100.0), ("n2", None, 5.0)]
    assert from_json({"node": "n1", "code": 79, "id": "a"}, 7.0)[0].event_id == evs[0].event_id
    assert from_json({"node": "n2", "message": "fan", "at": 5}, 1.0)[0].event_id == evs[1].event_id


@pytest.mark.parametrize(
    "body, words",
    [
        ([], "not an object"),
        ({"events": []}, "expected an event"),
        ({"node": "n1"}, "a code or a message"),
        ({"node": "n1", "code": True}, "integer"),
        ({"node": "n1", "code": 1.5}, "integer"),
        ({"node": "n1", "code": 79, "extra": 1}, "unknown field"),
        ({"node": "", "code": 79}, "not a node name"),
        ({"node": "n1", "code": 79, "at": float("nan")}, "not a time"),
        ({"events": [{"node": "n1", "code": 79}, {"node": "n2", "code": "x"}]}, "integer"),
        ({"node": "n1", "message": "SXid", "severity": "urgent"}, "severity must be one of info, warning, critical"),
        ({"node": "n1", "message": "SXid", "severity": 3}, "severity must be one of"),
        ({"node": "n1", "message": "SXid", "signature": "nvswitch_meltdown"}, "not a signature of the catalog"),
        ({"node": "n1", "message": "SXid", "signature": ["nvswitch_sxid_fatal"]}, "not a signature of the catalog"),
    ],
)
def test_a_bad_json_event_is_refused_whole(body, words) -> None:
    with pytest.raises(BadBody, match=words):
        from_json(body, 0.0)


def test_a_true_npd_condition_is_an_event_identified_by_its_transition() -> None:
    node = {
        "metadata": {"name": "gpu-node-07"},
        "status": {
            "conditions": [
                {"type": "Ready", "status": "True"},
                {"type": "KernelDeadlock", "status": "False", "reason": "KernelHasNoDeadlock"},
                {
                    "type": "XidError",
                    "status": "True",
                    "reason": "XidCritical",
                    "lastTransitionTime": "2026-11-30T20:00:00Z",
                    "message": "kernel: NVRM: Xid (PCI:0000:2b:00): 79, pid=1, name=x, GPU has fallen off the bus.",
                },
            ]
        },
    }
    (ev,) = from_node_conditions(node, ("KernelDeadlock", "XidError"), _detect)
    assert (ev.node, ev.code, ev.source) == ("gpu-node-07", 79, "npd") and ev.message.startswith(
        "XidError: XidCritical"
    )
    later = json.loads(json.dumps(node))
    later["status"]["conditions"][2]["lastTransitionTime"] = "2026-11-30T21:00:00Z"
    assert from_node_conditions(later, ("XidError",), _detect)[0].event_id != ev.event_id
    assert from_node_conditions(node, ("KernelDeadlock",), _detect) == []


@pytest.mark.parametrize(
    "event, severity, from_record",
    [
        ({"node": "n1", "message": "NVSwitch fatal SXid", "severity": "critical"}, "critical", False),
        ({"node": "n1", "code": 79}, "critical", False),  # the catalog's word for a code, when none is given
        ({"node": "n1", "code": 13, "severity": "warning"}, "warning", False),  # the sender's, when given
        ({"node": "n1", "message": "fan", "at": 5}, "", True),  # neither: none; a time given is the record's
    ],
)
def test_a_json_event_carries_its_severity_and_whether_its_time_is_its_own(event, severity, from_record) -> None:
    (ev,) = from_json(event, 100.0)
    assert (ev.severity, ev.at_from_record) == (severity, from_record)


def test_a_json_event_carries_the_signature_it_was_read_as() -> None:
    (ev,) = from_json(
        {"node": "n1", "message": "NVSwitch fatal SXid", "severity": "critical", "signature": "nvswitch_sxid_fatal"},
        100.0,
    )
    assert ev.signature == "nvswitch_sxid_fatal"
    (none,) = from_json({"node": "n1", "code": 79}, 100.0)
    assert none.signature == ""


@pytest.mark.parametrize(
    "label, severity",
    [
        ("critical", "critical"),
        ("warning", "critical"),  # a sender may say more than the catalog, never less: Xid 79 is critical
        ("page", "critical"),  # a route's own word: not fleetctl's, the catalog judges Xid 79
        (None, "critical"),
    ],
)
def test_an_alert_severity_label_is_read_only_when_it_is_a_severity(label, severity) -> None:
    body = json.loads(json.dumps(WEBHOOK))
    body["alerts"][0]["labels"].pop("severity", None)
    if label is not None:
        body["alerts"][0]["labels"]["severity"] = label
    (ev,) = from_alertmanager(body)
    assert ev.severity == severity and ev.at_from_record  # startsAt is when it began


# ---- every text bounded, every number and nesting checked ------------------------------------


def _alert_with(**labels) -> dict:
    body = json.loads(json.dumps(WEBHOOK))
    body["alerts"][0]["labels"].update(labels)
    return body


def test_a_1_mb_alertname_becomes_a_bounded_message() -> None:
    """Only annotations were bounded: a 1 MB alertname made a 1 MB event, and the node's
    workflow task failed with PAYLOADS_TOO_LARGE for ever."""
    body = _alert_with(alertname="G" * 1_000_000)
    body["alerts"][0]["annotations"] = {"value": "79"}
    (ev,) = from_alertmanager(body)
    assert len(ev.message) == MAX_TEXT and ev.message.startswith("GGG") and ev.message.endswith("…")


def test_every_label_and_annotation_is_bounded_and_encodable() -> None:
    body = _alert_with(alertname="Xid\ud800" + "x" * 200_000)
    body["alerts"][0]["annotations"]["summary"] = "\udcff" * 300_000
    (ev,) = from_alertmanager(body)
    assert len(ev.message) <= MAX_TEXT
    ev.message.encode("utf-8")  # no lone surrogate left
    assert ev.message.startswith("Xid\ufffdxxx")


@pytest.mark.parametrize(
    "where, value", [("labels", ["a", "list"]), ("annotations", {"an": "object"}), ("labels", True)]
)
def test_a_label_or_annotation_that_is_not_text_is_refused_by_name(where, value) -> None:
    body = json.loads(json.dumps(WEBHOOK))
    body["alerts"][0][where]["odd"] = value
    with pytest.raises(BadBody, match=rf"alerts\[0\]\.{where}\.odd: must be a string"):
        from_alertmanager(body)


def test_plain_json_text_fields_are_bounded_and_encodable() -> None:
    (ev,) = from_json({"node": "n1", "message": "a\ud800" * 100_000, "id": "\udfff" * 5000}, 1.0)
    assert len(ev.message) == MAX_TEXT and ev.message.startswith("a\ufffda")
    ev.message.encode("utf-8")


@pytest.mark.parametrize(
    "raw, words",
    [
        (b'{"node": "n1", "code": 1%s}' % (b"0" * 30), r"events\[0\]\.code: the code must be an integer"),
        (b'{"node": "n1", "code": 1%s}' % (b"0" * 5000), r"events\[0\]\.code: the code must be an integer"),
        (b'{"node": "n1", "code": 18446744073709551616}', r"events\[0\]\.code: the code must be an integer"),  # 2**64
        (b'{"node": "n1", "code": -9223372036854775809}', r"events\[0\]\.code: the code must be an integer"),
        (b'{"node": "n1", "code": 1e400}', r"events\[0\]\.code: the code must be an integer"),
        (b'{"node": "n1", "code": NaN}', r"events\[0\]\.code: the code must be an integer"),
        (b'{"node": "n1", "code": 79.5}', r"events\[0\]\.code: the code must be an integer"),
        (b'{"node": "n1", "code": 79, "at": 1%s}' % (b"0" * 40), r"events\[0\]\.at: not a time"),
        (b'{"node": "n1", "code": 79, "at": 1e300}', r"events\[0\]\.at: not a time"),
    ],
)
def test_numbers_past_64_bits_or_not_integers_are_refused_by_field(raw, words) -> None:
    with pytest.raises(BadBody, match=words):
        from_json(loads(raw), 0.0)


@pytest.mark.parametrize(
    "raw, words",
    [
        (b"[" * (MAX_DEPTH + 1) + b"]" * (MAX_DEPTH + 1), "nested deeper than"),
        (b'{"node": "n1", "message": ' + b"[" * 100_000 + b"]" * 100_000 + b"}", "nested deeper than"),
        (b'{"node": "n1", "message": "\xff\xfe"}', "not UTF-8 JSON"),
        (b'{"node": "n1", "message": "\xc3"}', "not UTF-8 JSON"),
        (b"{not json", "not JSON"),
        # Two readers of one body could each act on another value: refused, never the last kept.
        (b'{"node": "n1", "node": "n2", "code": 79}', "names 'node' twice"),
        (b'[{"node": "n1", "labels": {"a": 1, "a": 2}}]', "names 'a' twice"),
    ],
)
def test_bodies_too_deep_or_not_utf8_are_refused(raw, words) -> None:
    with pytest.raises(BadBody, match=words):
        loads(raw)


def test_a_surrogate_encoded_as_utf8_bytes_is_read_and_replaced() -> None:
    """CESU-style bytes (ED A0 80) decode to a lone surrogate, as the escape does."""
    (ev,) = from_json(loads(b'{"node": "n1", "message": "x\xed\xa0\x80y"}'), 0.0)
    assert ev.message == "x\ufffdy"


@pytest.mark.parametrize(
    "said, code, severity",
    [
        ("warning", 79, "critical"),  # never less than the catalog
        ("critical", 43, "critical"),  # more is the sender's to say
        ("", 43, "warning"),
    ],
)
def test_an_events_severity_is_the_catalogs_or_the_senders_when_graver(said, code, severity) -> None:
    (ev,) = from_json({"node": "n1", "code": code, "severity": said}, 100.0)
    assert ev.severity == severity


def test_a_merged_event_carries_its_count_and_last_time_and_a_bad_count_is_refused() -> None:
    (ev,) = from_json({"node": "n1", "code": 13, "at": 100.0, "repeat_count": 7, "last_seen": 160.0}, 200.0)
    assert (ev.repeat_count, ev.at, ev.last_at) == (7, 100.0, 160.0)
    assert ev.as_dict()["repeat_count"] == 7
    (alone,) = from_json({"node": "n1", "code": 13, "at": 100.0}, 200.0)
    assert "repeat_count" not in alone.as_dict()
    for bad in (0, -1, True, "7", 10**10):
        with pytest.raises(BadBody, match="repeat_count"):
            from_json({"node": "n1", "code": 13, "repeat_count": bad}, 200.0)


def _detect(message: str) -> list:
    return detect(message, CATALOG)
