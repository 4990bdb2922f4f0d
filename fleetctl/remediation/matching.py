"""Which runbook handles an event: a runbook's match against the event, the highest priority
first, else the fallback. Pure.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import assert_never

from fleetctl.remediation.events import Event, EventKind
from fleetctl.remediation.runbooks import Runbook


def matches(book: Runbook, event: Event, findings_text: str = "") -> bool:
    """Does the runbook handle this event? `findings_text` is the check's reason and findings."""
    match event.kind:
        case EventKind.XID:
            return event.code in book.match.xids
        case EventKind.STRAGGLER:
            return event.check in book.match.stragglers
        case EventKind.CHECK:
            return any(
                c.name == event.check
                and event.status in c.statuses
                and (c.finding is None or re.search(c.finding, f"{event.message}\n{findings_text}", re.I))
                for c in book.match.checks
            )
        case EventKind.MANUAL | EventKind.OPERATOR | EventKind.MAINTENANCE:
            return False  # no runbook names these: only the fallback may take one
        case _:
            assert_never(event.kind)


def runbook_for(books: Iterable[Runbook], event: Event, findings_text: str = "") -> Runbook | None:
    """The runbook that handles the event: the highest-priority match, else the fallback."""
    books = sorted(books, key=lambda b: (-b.priority, b.name))
    for book in books:
        if matches(book, event, findings_text):
            return book
    if event.kind is EventKind.MAINTENANCE:
        return None
    return next((b for b in books if b.match.fallback and event.remediable), None)
