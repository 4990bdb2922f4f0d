"""A bounded on-disk queue of events not yet delivered: append-only segment files of JSON
lines, each append fsynced before it counts, and a small state file (replaced atomically)
that says how far delivery got and how many events were dropped.

A crash mid-append leaves a torn last line, which the next open cuts off: that append never
returned, so its events were never acknowledged to anyone, and the source re-reads them
(same ids). An append that fails (a full disk) leaves the spool as it was and raises.

Past `max_events` events are dropped, and counted by severity: the oldest minor (not
critical) ones first; a critical event only when the spool holds nothing else, the oldest
first. A dropped event that is not at the head of the queue is marked by a tombstone line
(`["dropped", segment, line]`) in the same fsynced append, so a restart drops it again.

A file that cannot be read (a state file that is not the state, a segment line that is not
an event or a tombstone: truncated JSON, binary garbage, wrong types) is moved aside as
`NAME.corrupt-<UTC time>`, logged in one line and listed in `moved_aside`; the readable
events of a corrupt segment are kept (written again, in order, to a new segment before the
old file is moved), so one bad line costs only itself.
"""

from __future__ import annotations

import itertools
import json
import logging
import os
import re
from collections import deque
from collections.abc import Callable
from datetime import UTC, datetime
from io import BufferedWriter
from pathlib import Path
from typing import Any

log = logging.getLogger("fleetctl.agent")

# A spooled event: a JSON object (what fleetctl.agent.runner.valid_event accepts).
Event = dict[str, Any]

SEGMENT_EVENTS = 10_000  # lines (events and tombstones) a segment file holds before the next one starts
SEVERITY_WORDS = ("critical", "warning", "info")  # drops are counted by these, and "none" for any other
_SEGMENT = re.compile(r"^segment-(\d{8,})\.jsonl\Z")
_MAX_INT = 2**63 - 1


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_atomically(path: Path, text: str) -> None:
    tmp = path.with_suffix(path.suffix + ".tmp")
    with open(tmp, "w") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    _fsync_dir(path.parent)


def move_aside(path: Path, why: str) -> Path:
    """Rename a file the agent cannot read to `NAME.corrupt-<UTC time>`, with one log line."""
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%S.%fZ")
    aside = path.with_name(f"{path.name}.corrupt-{stamp}")
    os.replace(path, aside)
    _fsync_dir(path.parent)
    log.warning("%s is corrupt (%s): moved aside to %s", path, why, aside.name)
    return aside


def severity_of(event: Event) -> str:
    severity = event.get("severity")
    return severity if severity in SEVERITY_WORDS else "none"


def _count(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= _MAX_INT


def _read_state(raw: bytes) -> dict[str, Any] | None:
    """The state file's content, or None when it is not one."""
    try:
        state = json.loads(raw)
    except (ValueError, RecursionError):
        return None
    if not isinstance(state, dict) or not all(_count(state.get(k, 0)) for k in ("segment", "line", "dropped")):
        return None
    by = state.get("dropped_by_severity", {})
    if not isinstance(by, dict) or not all(k in (*SEVERITY_WORDS, "none") and _count(v) for k, v in by.items()):
        return None
    return state


class Spool:
    def __init__(self, directory: Path, max_events: int, valid: Callable[[Event], bool] | None = None):
        """`valid`: whether a spooled object is an event the reader can deliver (a line that
        is not is corrupt); default: any JSON object."""
        if max_events < 1:
            raise ValueError("the spool must hold at least one event")
        self.dir, self.max_events = Path(directory), max_events
        self._valid = valid or (lambda ev: True)
        self.dir.mkdir(parents=True, exist_ok=True)
        self.moved_aside: list[Path] = []  # files found corrupt at open, under their new names
        self._state_path = self.dir / "state.json"
        state: dict[str, Any] = {}
        if self._state_path.exists():
            read = _read_state(self._state_path.read_bytes())
            if read is None:  # where delivery got is unknown: every spooled event is sent again (same ids)
                self.moved_aside.append(move_aside(self._state_path, "not a spool state"))
            else:
                state = read
        # Delivered (or dropped) through line `line` of segment `segment`.
        self._segment, self._line = state.get("segment", 0), state.get("line", 0)
        self.dropped = state.get("dropped", 0)
        self.dropped_by_severity = {
            k: state.get("dropped_by_severity", {}).get(k, 0) for k in (*SEVERITY_WORDS, "none")
        }
        self._pending: deque[tuple[int, int, Event]] = deque()  # (segment, line, event)
        self._handed: list[tuple[int, int]] = []  # positions pending() returned last
        self._write_segment, self._write_line = self._segment, 0
        self._load()
        self._file: BufferedWriter | None = open(self._segment_path(self._write_segment), "ab")
        if self.moved_aside:
            self._write_state()
        self._drop_past_bound()  # a spool written with a larger bound

    def _segment_path(self, n: int) -> Path:
        return self.dir / f"segment-{n:08d}.jsonl"

    def _parse(self, raw: bytes) -> Event | tuple[int, int] | None:
        """An event, a tombstone's position, or None for a line that is neither."""
        try:
            item = json.loads(raw)
        except (ValueError, RecursionError):
            return None
        if isinstance(item, dict):
            return item if self._valid(item) else None
        if isinstance(item, list) and len(item) == 3 and item[0] == "dropped" and _count(item[1]) and _count(item[2]):
            return (item[1], item[2])
        return None

    def _load(self) -> None:
        segments = sorted((int(m[1]), self.dir / m[0]) for m in map(_SEGMENT.match, os.listdir(self.dir)) if m)
        entries: list[tuple[int, int, Event]] = []
        tombstones: set[tuple[int, int]] = set()
        corrupt: list[tuple[Path, int]] = []
        for n, path in segments:
            if n < self._segment:
                path.unlink()  # delivered before a crash kept it from being removed
                continue
            data = path.read_bytes()
            good = data.rfind(b"\n") + 1
            if good < len(data):  # a torn append: never acknowledged, the source re-reads it
                with open(path, "r+b") as f:
                    f.truncate(good)
                    os.fsync(f.fileno())
            lines = data[:good].split(b"\n")[:-1]
            unreadable = 0
            for i, raw in enumerate(lines, 1):
                if n == self._segment and i <= self._line:
                    continue
                item = self._parse(raw)
                if item is None:
                    unreadable += 1
                elif isinstance(item, tuple):
                    tombstones.add(item)
                else:
                    entries.append((n, i, item))
            if unreadable:
                corrupt.append((path, unreadable))
            self._write_segment, self._write_line = n, len(lines)
        self._pending.extend(e for e in entries if (e[0], e[1]) not in tombstones)
        if corrupt:
            self._salvage(corrupt)
        if self._write_line >= SEGMENT_EVENTS:
            self._write_segment, self._write_line = self._write_segment + 1, 0

    def _salvage(self, corrupt: list[tuple[Path, int]]) -> None:
        """The readable pending events go to a new segment (fsynced) before the corrupt files
        are moved aside and delivery restarts there; a crash in between sends some twice
        (same ids), never loses one."""
        n = self._write_segment + 1
        path = self._segment_path(n)
        with open(path, "w") as f:
            f.write("".join(json.dumps(ev, separators=(",", ":")) + "\n" for _, _, ev in self._pending))
            f.flush()
            os.fsync(f.fileno())
        _fsync_dir(self.dir)
        for bad, lines in corrupt:
            self.moved_aside.append(
                move_aside(bad, f"{lines} unreadable line{'s' if lines > 1 else ''}; the readable events kept")
            )
        self._pending = deque((n, i, ev) for i, (_, _, ev) in enumerate(self._pending, 1))
        self._segment, self._line = n, 0
        self._write_state()
        for m, old in ((int(m[1]), self.dir / m[0]) for m in map(_SEGMENT.match, os.listdir(self.dir)) if m):
            if m < n:
                old.unlink()
        self._write_segment, self._write_line = n, len(self._pending)

    @property
    def depth(self) -> int:
        return len(self._pending)

    def _write_lines(self, lines: list[str]) -> list[tuple[int, int]]:
        """Append the lines durably (rolling to new segments as they fill); their positions.
        On failure the segment being written is cut back to where it was, and this raises."""
        positions: list[tuple[int, int]] = []
        if self._file is None:  # after a failed append
            self._file = open(self._segment_path(self._write_segment), "ab")
        segment, line = self._write_segment, self._write_line
        start = 0
        while start < len(lines):
            if line >= SEGMENT_EVENTS:
                new = open(self._segment_path(segment + 1), "ab")
                self._file.close()
                self._file, segment, line = new, segment + 1, 0
                self._write_segment, self._write_line = segment, 0
            chunk = lines[start : start + SEGMENT_EVENTS - line]
            size = self._file.tell()
            try:
                self._file.write("".join(chunk).encode())
                self._file.flush()
                os.fsync(self._file.fileno())
            except OSError:
                self._undo(segment, size)
                raise
            positions += [(segment, line + k) for k in range(1, len(chunk) + 1)]
            line += len(chunk)
            self._write_line = line
            start += len(chunk)
        return positions

    def _undo(self, segment: int, size: int) -> None:
        """Cut the segment back to `size`; where even that fails, the segment may hold lines
        past those counted, so writing goes on in a new one (a restart reads those lines as
        pending: sent again with their ids, never lost, never a position off by one)."""
        if self._file is not None:
            try:
                self._file.close()
            except OSError:
                pass  # the buffered lines that would not go out are dropped with the file object
        self._file = None
        try:
            with open(self._segment_path(segment), "r+b") as f:
                f.truncate(size)
                os.fsync(f.fileno())
        except OSError:
            self._write_segment, self._write_line = segment + 1, 0

    def append(self, events: list[Event]) -> int:
        """Write the events durably; returns how many events were dropped to keep the bound.
        Raises OSError (the spool unchanged) when they cannot be written."""
        if not events:
            return 0
        positions = self._write_lines([json.dumps(ev, separators=(",", ":")) + "\n" for ev in events])
        self._pending.extend((seg, line, ev) for (seg, line), ev in zip(positions, events, strict=False))
        return self._drop_past_bound()

    def _drop_past_bound(self) -> int:
        excess = len(self._pending) - self.max_events
        if excess <= 0:
            return 0
        victims: list[tuple[int, int, Event]] = []
        for entry in self._pending:  # the oldest minor events
            if entry[2].get("severity") != "critical":
                victims.append(entry)
                if len(victims) == excess:
                    break
        if len(victims) < excess:  # nothing but critical events left: the oldest of them
            chosen = {(s, n) for s, n, _ in victims}
            victims += [e for e in self._pending if (e[0], e[1]) not in chosen][: excess - len(victims)]
        gone = {(s, n) for s, n, _ in victims}
        try:
            self._write_lines([json.dumps(["dropped", s, n]) + "\n" for s, n in sorted(gone)])
        except OSError as exc:  # kept over the bound until the next append; nothing is lost
            log.warning("cannot mark %d dropped events (%s): kept for now", len(gone), exc)
            return 0
        self._pending = deque(e for e in self._pending if (e[0], e[1]) not in gone)
        for _, _, ev in victims:
            self.dropped_by_severity[severity_of(ev)] += 1
        self.dropped += len(victims)
        self._write_state()
        return len(victims)

    def pending(self, limit: int) -> list[Event]:
        head = list(itertools.islice(self._pending, limit))
        self._handed = [(s, n) for s, n, _ in head]
        return [ev for _, _, ev in head]

    def ack(self, count: int) -> None:
        """The first `count` events pending() returned last are delivered (events dropped
        since are not counted again); without that call, the first `count` pending ones."""
        if count <= 0:
            return
        if count <= len(self._handed):
            through = self._handed[count - 1]
            while self._pending and (self._pending[0][0], self._pending[0][1]) <= through:
                self._segment, self._line, _ = self._pending.popleft()
        else:
            for _ in range(min(count, len(self._pending))):
                self._segment, self._line, _ = self._pending.popleft()
        self._handed = []
        if not self._pending:  # everything delivered: the next delivery starts after the writes
            self._segment, self._line = self._write_segment, self._write_line
        if self._line >= SEGMENT_EVENTS and self._segment < self._write_segment:  # a full segment, all delivered
            self._segment, self._line = self._segment + 1, 0
        self._write_state()
        for m, path in ((int(m[1]), self.dir / m[0]) for m in map(_SEGMENT.match, os.listdir(self.dir)) if m):
            if m < self._segment:
                path.unlink()

    def _write_state(self) -> None:
        write_atomically(
            self._state_path,
            json.dumps(
                {
                    "segment": self._segment,
                    "line": self._line,
                    "dropped": self.dropped,
                    "dropped_by_severity": self.dropped_by_severity,
                }
            ),
        )

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
