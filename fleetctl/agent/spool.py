"""A bounded on-disk queue of events not yet delivered: append-only segment files of JSON
lines, each append fsynced before it counts, and a small state file (replaced atomically)
that says how far delivery got and how many events were dropped.

A crash mid-append leaves a torn last line, which the next open cuts off: that append never
returned, so its events were never acknowledged to anyone, and the source re-reads them
(same ids). Past `max_events` the oldest pending events are dropped, and counted.
"""

from __future__ import annotations

import json
import os
from collections import deque
from pathlib import Path

SEGMENT_EVENTS = 10_000  # events a segment file holds before the next one starts


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


class Spool:
    def __init__(self, directory: Path, max_events: int):
        if max_events < 1:
            raise ValueError("the spool must hold at least one event")
        self.dir, self.max_events = Path(directory), max_events
        self.dir.mkdir(parents=True, exist_ok=True)
        self._state_path = self.dir / "state.json"
        state = json.loads(self._state_path.read_text()) if self._state_path.exists() else {}
        # Delivered (or dropped) through line `line` of segment `segment`.
        self._segment, self._line = int(state.get("segment", 0)), int(state.get("line", 0))
        self.dropped = int(state.get("dropped", 0))
        self._pending: deque[tuple[int, int, dict]] = deque()  # (segment, line, event)
        self._write_segment, self._write_line = self._segment, 0
        self._load()
        self._file = open(self._segment_path(self._write_segment), "a")

    def _segment_path(self, n: int) -> Path:
        return self.dir / f"segment-{n:08d}.jsonl"

    def _load(self) -> None:
        for path in sorted(self.dir.glob("segment-*.jsonl")):
            n = int(path.stem.split("-")[1])
            if n < self._segment:
                path.unlink()  # delivered before a crash kept it from being removed
                continue
            data = path.read_bytes()
            good = data.rfind(b"\n") + 1
            if good < len(data):  # a torn append: never acknowledged, the source re-reads it
                with open(path, "r+b") as f:
                    f.truncate(good)
                    os.fsync(f.fileno())
            lines = data[:good].splitlines()
            for i, raw in enumerate(lines, 1):
                if n == self._segment and i <= self._line:
                    continue
                self._pending.append((n, i, json.loads(raw)))
            self._write_segment, self._write_line = n, len(lines)
        if self._write_line >= SEGMENT_EVENTS:
            self._write_segment, self._write_line = self._write_segment + 1, 0

    @property
    def depth(self) -> int:
        return len(self._pending)

    def append(self, events: list[dict]) -> int:
        """Write the events durably; returns how many old ones were dropped to make room."""
        if not events:
            return 0
        for ev in events:
            if self._write_line >= SEGMENT_EVENTS:
                self._file.close()
                self._write_segment, self._write_line = self._write_segment + 1, 0
                self._file = open(self._segment_path(self._write_segment), "a")
            self._write_line += 1
            self._file.write(json.dumps(ev, separators=(",", ":")) + "\n")
            self._pending.append((self._write_segment, self._write_line, ev))
        self._file.flush()
        os.fsync(self._file.fileno())
        excess = len(self._pending) - self.max_events
        if excess > 0:
            self.dropped += excess
            self.ack(excess)
        return max(excess, 0)

    def pending(self, limit: int) -> list[dict]:
        return [ev for _, _, ev in list(self._pending)[:limit]]

    def ack(self, count: int) -> None:
        """The first `count` pending events are delivered (or dropped)."""
        if count <= 0:
            return
        for _ in range(min(count, len(self._pending))):
            self._segment, self._line, _ = self._pending.popleft()
        if not self._pending:  # everything delivered: the next delivery starts after the writes
            self._segment, self._line = self._write_segment, self._write_line
        if self._line >= SEGMENT_EVENTS and self._segment < self._write_segment:  # a full segment, all delivered
            self._segment, self._line = self._segment + 1, 0
        write_atomically(self._state_path, json.dumps({"segment": self._segment, "line": self._line,
                                                       "dropped": self.dropped}))
        for path in self.dir.glob("segment-*.jsonl"):
            if int(path.stem.split("-")[1]) < self._segment:
                path.unlink()

    def close(self) -> None:
        self._file.close()
