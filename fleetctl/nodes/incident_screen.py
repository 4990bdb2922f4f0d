"""`fleet status --watch`: the screen an operator keeps open during an incident, laid out to
fit the terminal (80x24 and up) as plain lines.

Two parts under a two-line head: one line per node that needs an operator (stalled, runbook
failed or stuck, RMA held, drain held, suspect: what it needs merged onto one line, its
repeats counted, the newest first), and a strip of the latest transitions of every node (an
XID 79's drain, reboot and return take seconds: the strip keeps them on screen for minutes
after). Each part gets its share of the height; what does not fit is counted in its last
line. No cell is cut without an ellipsis."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from fleetctl.text import printable

# The lines the head takes (the fleet's counts, automation) and the two parts' titles.
FIXED_LINES = 4
# A part never gets fewer rows than this while it has any (the other part gives them up).
MIN_ROWS = 3
ELLIPSIS = "…"


@dataclass
class Attention:
    """A node that needs an operator, and for what: each reason once, repeats counted."""

    node: str
    needs: list[str] = field(default_factory=list)
    since: datetime | None = None
    reason: str = ""

    def add(self, need: str, since: datetime | None, reason: str) -> None:
        self.needs.append(need)
        if since is not None and (self.since is None or since > self.since):
            self.since = since
        self.reason = self.reason or reason


def _utc(at: datetime | None) -> datetime | None:
    return None if at is None else (at if at.tzinfo else at.replace(tzinfo=UTC))


def attention(data: dict[str, Any]) -> list[Attention]:
    """The nodes of `data` (fleet status) that need an operator, one each, the newest first."""
    found: dict[str, Attention] = {}

    def note(node: str, need: str, since: Any, reason: Any) -> None:
        found.setdefault(node, Attention(node)).add(need, _utc(since), str(reason or ""))

    for x in data.get("stalled", []):
        note(x["node"], "stalled", x["since"], x["reason"])
    for x in data.get("needs_operator", []):
        note(x["node"], x["condition"], x["since"], x["reason"])
    for x in data.get("rma_held", []):
        note(x["node"], f"RMA {x['id']} held", x["opened_at"], x["held_reason"])
    for x in data.get("held_drains", []):
        times = f" x{x['refusals']}" if x["refusals"] > 1 else ""
        note(x["node"], f"drain held{times}", x.get("last") or x["since"], x["reason"])
    for x in data.get("suspect", []):
        note(x["node"], "suspect", x["since"], x["reason"])
    oldest = datetime.min.replace(tzinfo=UTC)
    return sorted(found.values(), key=lambda a: (a.since or oldest, a.node), reverse=True)


def cut(text: str, width: int) -> str:
    """`text` in at most `width` characters, an ellipsis where it was cut."""
    text = printable(text, keep_newlines=False)
    if width <= 0:
        return ""
    return text if len(text) <= width else text[: width - 1] + ELLIPSIS


def _clock(at: datetime | None) -> str:
    moment = _utc(at)
    return moment.strftime("%H:%M:%S") if moment is not None else "--:--:--"


def _ago(since: datetime | None, now: datetime) -> str:
    if since is None:
        return "-"
    seconds = max(0, int((now - since).total_seconds()))
    if seconds < 120:
        return f"{seconds}s"
    if seconds < 7200:
        return f"{seconds // 60}m"
    if seconds < 172800:
        return f"{seconds // 3600}h"
    return f"{seconds // 86400}d"


def _shares(attention_rows: int, transition_rows: int, budget: int) -> tuple[int, int]:
    """Rows for each part out of `budget`: each its MIN_ROWS (or all it has) first, then the
    node list what it needs, then the transitions the rest."""
    first = min(attention_rows, MIN_ROWS)
    second = min(transition_rows, MIN_ROWS)
    if first + second > budget:
        first = min(first, max(budget - second, budget // 2))
        return first, max(0, budget - first)
    first = min(attention_rows, budget - second)
    return first, min(transition_rows, budget - first)


def _fitted(rows: Sequence[str], room: int, more: str) -> list[str]:
    """`rows` in `room` lines: the last says how many more there are when they do not fit."""
    if len(rows) <= room:
        return list(rows)
    if room <= 0:
        return []
    return [*rows[: room - 1], more.format(len(rows) - room + 1)]


def watch_lines(
    head: str,
    automation: str,
    data: dict[str, Any],
    transitions: Iterable[dict[str, Any]],
    width: int,
    height: int,
    now: datetime,
) -> list[str]:
    """The screen: at most `height` lines of at most `width` characters."""
    needing = attention(data)
    moved = list(transitions)
    name_width = min(28, max([len(a.node) for a in needing] + [len(t["node"]) for t in moved] + [4]))
    node_rows = [
        f"  {a.node.ljust(name_width)}  {cut(', '.join(a.needs), 24).ljust(24)} {_ago(a.since, now):>4}  {a.reason}"
        for a in needing
    ]
    moved_rows = [
        f"  {_clock(t['at'])} {t['node'].ljust(name_width)}  {t['from']}>{t['to']}"
        f"  {t.get('cause') or t['trigger']} ({t['actor']})"
        for t in moved
    ]
    attention_room, moved_room = _shares(len(node_rows), len(moved_rows), max(0, height - FIXED_LINES))
    lines = [
        head,
        automation,
        f"needs an operator: {len(needing)} node{'s' if len(needing) != 1 else ''} (newest first)"
        if needing
        else "needs an operator: none",
        *_fitted(node_rows, attention_room, "  ... {} more: fleetctl fleet status"),
        f"latest transitions: {len(moved_rows)} (newest first)" if moved_rows else "latest transitions: none",
        *_fitted(moved_rows, moved_room, "  ... {} more: fleetctl node history NODE"),
    ]
    return [cut(line, width) for line in lines[:height]]
