"""fleetctl.text.one_line: what every error message from elsewhere is reduced to."""

from __future__ import annotations

import pytest
from temporalio.client import WorkflowFailureError, WorkflowUpdateFailedError
from temporalio.exceptions import ApplicationError

from fleetctl.text import MAX_TEXT, bounded, failure_message, one_line


@pytest.mark.parametrize(
    "error, line",
    [
        ("plain", "plain"),
        ("two\nlines\r\n\tand  tabs ", "two lines and tabs"),
        ("\x1b[2Jcleared\x07", "\\x1b[2Jcleared\\x07"),
        ("c1 \x9b control", "c1 \\x9b control"),
        (ValueError("bad\nvalue"), "bad value"),
        (TimeoutError(), "TimeoutError"),
        ("", ""),
        ("x" * 400, "x" * 299 + "…"),
    ],
)
def test_one_line(error, line) -> None:
    assert one_line(error) == line


def test_limit() -> None:
    assert one_line("abcdef", limit=4) == "abc…"


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("fallen off the bus", "fallen off the bus"),
        ("lone \ud800 surrogate", "lone \ufffd surrogate"),  # JSON's "\ud800" decodes to this
        ("pair \ud83d\ude00 split", "pair \ufffd\ufffd split"),  # surrogates as code points, never a pair
        ("\x1b]0;title\x07 kept", "\x1b]0;title\x07 kept"),  # evidence: escaped only where shown
        ("", ""),
    ],
)
def test_bounded_replaces_what_cannot_be_encoded(text: str, expected: str) -> None:
    assert bounded(text) == expected
    bounded(text).encode("utf-8")


def test_bounded_cuts_at_the_one_limit_and_marks_the_cut() -> None:
    assert bounded("x" * MAX_TEXT) == "x" * MAX_TEXT
    cut = bounded("x" * (MAX_TEXT + 1))
    assert len(cut) == MAX_TEXT and cut.endswith("…")
    assert bounded("abcdef", limit=4) == "abc…"


@pytest.mark.parametrize(
    "error, message",
    [
        # An update refused by the workflow: the refusal's own words, not its type.
        (WorkflowUpdateFailedError(ApplicationError("node is in rma", type="CommandRejected")), "node is in rma"),
        (WorkflowFailureError(cause=ApplicationError("no healthy nodes")), "no healthy nodes"),
        # A wrapped error without a message of its own: the wrapped error.
        (WorkflowUpdateFailedError(TimeoutError("update timed out")), "update timed out"),
        # Nothing wrapped: the error itself.
        (RuntimeError("plain"), "plain"),
    ],
)
def test_a_failure_from_temporal_says_what_it_wraps(error: BaseException, message: str) -> None:
    assert failure_message(error) == message
