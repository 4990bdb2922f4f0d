"""Property: no input stalls a node's workflow. Every input class (sizes from 0 to
megabytes; lone surrogates, invalid UTF-8 bytes, NULs, control characters, bidi overrides;
numbers past 64 bits, NaN, floats; nesting past the bound) is fed through the intake's HTTP
endpoints and the CLI (`node event`, `node drain --reason`) of a live stack; every answer
is an acceptance or a one-line refusal, and an XID 79 sent after them all still drains the
node within the bound.

The examples are drawn by Hypothesis, derandomized (the same examples every run: the test
never fails once by chance), a bounded number of them sent as a batch, then one XID 79."""

from __future__ import annotations

import asyncio
import json
import operator

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from fleetctl.db import queries
from fleetctl.intake.parse import MAX_CODE, MAX_DEPTH
from fleetctl.intake.server import MAX_BODY
from fleetctl.text import MAX_TEXT
from tests.fault_tolerance.test_poisoned_input import DRAIN_S, Stack, _alert, stack  # noqa: F401 - the live stack fixture
from tests.support.fleet import Cli, one_line_error, wait_for

pytestmark = [pytest.mark.temporal]


def _examples(count: int) -> settings:
    return settings(
        max_examples=count, derandomize=True, database=None, deadline=None, suppress_health_check=list(HealthCheck)
    )


# What a sender or an operator puts in text: each unit repeated to a size.
UNITS = st.sampled_from(
    [
        "x",
        "é",
        "\U0001f600",
        "\ud800",
        "\udcff",
        "\udfff\ud800",
        "\x00",
        "\x1b]0;pwned\x07",
        "\u202e",
        "\u200b",
        "\ufeff",
        "\r\n",
        "\t",
        "\x7f\x9b",
        "|",
        "Reason=",
        "$(id)",
    ]
)
SIZES = st.sampled_from([0, 1, 7, MAX_TEXT - 1, MAX_TEXT, MAX_TEXT + 1, 70_000, 300_000, 1_100_000])
TEXTS = st.one_of(st.text(max_size=40), st.builds(operator.mul, UNITS, SIZES))


def _harmless(number):
    """A number as drawn, except that a code the intake would accept is Xid 13 (info: never
    drains, never escalates), so nothing but the final XID 79 may drain the node."""
    if isinstance(number, bool) or not isinstance(number, (int, float)):
        return number
    if number == number and number not in (float("inf"), float("-inf")) and 0 <= number <= MAX_CODE:
        return 13
    return number


NUMBERS = st.one_of(
    st.none(),
    st.integers(-(2**70), 2**70),
    st.floats(allow_nan=True, allow_infinity=True),
    st.booleans(),
    st.sampled_from(["13", "1" * 30, "-1", "0x4f", "79.5"]),
).map(_harmless)
# Raw JSON number literals Python's json cannot, or must not, turn into a code.
RAW_NUMBERS = st.sampled_from(
    [
        b"1" + b"0" * 30,
        b"9" * 5000,
        b"18446744073709551616",
        b"-9223372036854775809",
        b"1e400",
        b"NaN",
        b"-Infinity",
        b"13.0000000000000000001",
    ]
)
BAD_BYTES = st.sampled_from(
    [b"\xff", b"\xc3(", b"\xed\xa0\x80", b"\xf4\x90\x80\x80", b"\xc0\xaf", b"\x00", b"\x80" * 3000]
)
DEPTHS = st.sampled_from([1, MAX_DEPTH - 3, MAX_DEPTH + 1, 900, 5000, 200_000])
# A sender's own id for an event: mostly a plain one (so the hostile text is elsewhere), or hostile.
IDS = st.one_of(st.uuids().map(str), TEXTS)
# Severity words a sender gives: the plain JSON intake refuses all but three ("critical" is
# left out, with no code it drains the node).
SEVERITIES = st.one_of(st.sampled_from(["", "info", "warning"]), TEXTS)


@st.composite
def event_bodies(draw, node: str) -> bytes:
    """A body for POST /events: a plain event (or a list of them) with hostile fields, or one
    with invalid UTF-8, a raw number literal or nesting spliced into it."""
    kind = draw(st.sampled_from(["fields", "events", "bytes", "number", "nested"]))
    event = {"node": node, "message": draw(TEXTS), "severity": draw(SEVERITIES)}
    for field, strategy in (("code", NUMBERS), ("id", IDS), ("at", NUMBERS)):
        if draw(st.booleans()):
            event[field] = draw(strategy)
    if kind == "fields":
        return json.dumps(event).encode()
    if kind == "events":
        return json.dumps({"events": [event] * draw(st.integers(1, 3))}).encode()
    head = b'{"node": "%s", "severity": "warning", "message": ' % node.encode()
    if kind == "bytes":
        return head + b'"bad ' + draw(BAD_BYTES) + b' byte"}'
    if kind == "number":
        return head + b'"n", "code": ' + draw(RAW_NUMBERS) + b"}"
    depth = draw(DEPTHS)
    return head + b"[" * depth + b'"x"' + b"]" * depth + b"}"


@st.composite
def alert_bodies(draw, node: str) -> bytes:
    """An Alertmanager webhook whose every label and annotation may be hostile."""
    labels = {
        "alertname": draw(TEXTS),
        "Hostname": node,
        draw(st.one_of(st.just("gpu"), TEXTS)): draw(TEXTS),
        "severity": draw(SEVERITIES),
    }
    if draw(st.booleans()):
        labels["xid"] = str(_harmless(draw(st.integers(-(2**70), 2**70))))
    notes = {"summary": draw(TEXTS), "description": draw(TEXTS)}
    if draw(st.booleans()):
        notes["value"] = draw(NUMBERS)
    alert = {
        "status": "firing",
        "labels": labels,
        "annotations": notes,
        "startsAt": "2026-12-01T20:00:00Z",
        "fingerprint": draw(IDS),
    }
    return json.dumps({"version": "4", "status": "firing", "alerts": [alert]}).encode()


def _answered(status: int, text: str) -> None:
    """An acceptance, or a refusal in one line: never a server error or a dropped request."""
    assert status in (202, 400, 413), (status, text[:300])
    assert text.count("\n") <= 1 and len(text) <= 400, text[:300]


def _cli_answered(result, codes=(0, 2)) -> None:
    assert result.exit_code in codes, (result.exit_code, result.output[:300])
    if result.exit_code:
        one_line_error(result)


async def test_no_input_through_the_intake_or_the_cli_keeps_an_xid_79_from_draining(stack) -> None:
    s: Stack = await stack(5)
    target, drained_by_operator = s.nodes[0], s.nodes[1:]
    cli = Cli(s.settings)

    @_examples(100)
    @given(body=st.one_of(event_bodies(target), alert_bodies(target)))
    # The inputs that once stalled a node's workflow, always among the examples: a lone surrogate in a message whose
    # id is plain; a 1 MB alertname; a 200 KB label.
    @example(body=b'{"node": "%s", "id": "p-1", "message": "GPU \\ud800", "severity": "warning"}' % target.encode())
    @example(body=json.dumps(_alert(target, "G" * 1_000_000, severity="warning")).encode())
    @example(body=json.dumps(_alert(target, "X" * 200_000, xid="13")).encode())
    def through_the_intake(body: bytes) -> None:
        path = "/alertmanager" if body.startswith(b'{"version"') else "/events"
        status, text = s.post(path, body)
        if status == 0:  # refused unread (413), the connection closed under the rest of the body
            assert len(body) > MAX_BODY, text
        else:
            _answered(status, text)

    @_examples(25)
    @given(
        message=TEXTS,
        severity=st.sampled_from(["info", "warning"]),
        xid=st.one_of(st.none(), st.integers(-(2**70), 2**70).map(_harmless)),
    )
    def through_node_event(message: str, severity: str, xid) -> None:
        args = ["node", "event", target, "--message", message, "--severity", severity]
        _cli_answered(cli(*args, *(["--xid", str(xid)] if xid is not None else [])))

    drains = iter(drained_by_operator)

    @_examples(len(drained_by_operator))
    @given(reason=TEXTS)
    def through_node_drain(reason: str) -> None:
        node = next(drains, None)
        if node is not None:  # one production node per drawn reason
            _cli_answered(cli("node", "drain", node, "--reason", reason, "--yes"))

    for feed in (through_the_intake, through_node_event, through_node_drain):
        await asyncio.to_thread(feed)

    assert queries.get_node(s.engine, target).state == "production"  # nothing drawn drained it
    await s.xid_79_drains(target)
    # Every node an operator drained with a drawn reason: its cause is bounded, and its
    # workflow still records what comes after.
    for node in drained_by_operator:
        for e in queries.node_events(s.engine, node):
            assert len(e.cause) <= MAX_TEXT and "\x00" not in e.cause
            e.cause.encode("utf-8")
        status, text = s.post("/events", {"node": node, "code": 79, "id": f"{node}-after"})
        assert status == 202, text
    for node in drained_by_operator:
        await wait_for(
            lambda node=node: any(e.code == 79 for e in queries.health_events(s.engine, node)),
            DRAIN_S,
            f"{node}'s workflow to record the XID 79 after its drain",
        )
