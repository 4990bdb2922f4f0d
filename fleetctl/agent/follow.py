"""Where the kernel log comes from: /dev/kmsg (or a file in its format), `journalctl -k -f
-o json`, or a plain log file that is rotated and truncated under the agent. Every source
is polled without blocking and says where it got to (its cursor), so a restarted agent
goes on from there; ids, not cursors, are what keep an event from counting twice."""

from __future__ import annotations

import errno
import os
import subprocess
import time
from collections.abc import Sequence
from pathlib import Path

from fleetctl.agent.records import BadRecord, KernelRecord, file_record, parse_journal_json, parse_kmsg

READ_CHUNK = 1 << 16
MAX_LINE = 1 << 16  # a "line" longer than this is cut there: memory stays bounded
# Records one poll returns at most (plus the rest of one read): a first start on a large
# log file reads it in pieces, each spooled before the next is read.
MAX_RECORDS = 10_000


class _Lines:
    """Bytes in, complete lines out; a partial line waits for its end."""

    def __init__(self) -> None:
        self.partial = b""

    def feed(self, data: bytes) -> list[bytes]:
        lines = (self.partial + data).split(b"\n")
        self.partial = lines.pop()
        if len(self.partial) > MAX_LINE:
            lines.append(self.partial[:MAX_LINE])
            self.partial = b""
        return lines


class FileSource:
    """A log file followed like `tail -F`: a rotated file is read to its end before the new
    one is opened, a truncated one is read again from the start."""

    def __init__(self, path: Path, cursor: dict | None = None, from_end: bool = False):
        self.path, self.lines_read = Path(path), 0
        self._fd: int | None = None
        self._inode, self._offset = None, 0
        self._lines = _Lines()
        self._resume = cursor or {}
        self._from_end = from_end and not cursor

    @property
    def cursor(self) -> dict:
        return {"inode": self._inode, "offset": self._offset}

    def _open(self) -> bool:
        try:
            fd = os.open(self.path, os.O_RDONLY)
        except FileNotFoundError:
            return False
        st = os.fstat(fd)
        self._fd, self._inode, self._offset, self._lines = fd, st.st_ino, 0, _Lines()
        if self._resume.get("inode") == st.st_ino and int(self._resume.get("offset", 0)) <= st.st_size:
            self._offset = int(self._resume["offset"])
        elif self._from_end:
            self._offset = st.st_size
        self._resume, self._from_end = {}, False
        return True

    def poll(self) -> list[KernelRecord]:
        if self._fd is None and not self._open():
            return []
        out = self._read_to_end()
        if len(out) >= MAX_RECORDS:
            return out  # more to read from this file before looking for a rotation
        try:
            st = os.stat(self.path)
        except FileNotFoundError:
            return out  # rotated away, the new one not there yet: keep the old one open
        if st.st_ino != self._inode:
            os.close(self._fd)
            self._fd = None
            if self._open():
                out += self._read_to_end()
        elif st.st_size < self._offset + len(self._lines.partial):  # truncated in place
            self._offset, self._lines = 0, _Lines()
            out += self._read_to_end()
        return out

    def _read_to_end(self) -> list[KernelRecord]:
        out, now = [], time.time()
        while True:
            if len(out) >= MAX_RECORDS:
                return out
            data = os.pread(self._fd, READ_CHUNK, self._offset + len(self._lines.partial))
            if not data:
                return out
            for raw in self._lines.feed(data):
                line = raw.decode("utf-8", "replace")
                out.append(file_record(line, self._inode, self._offset, now))
                self._offset += len(raw) + 1
                self.lines_read += 1

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


class KmsgSource:
    """/dev/kmsg: each read returns one record; records overwritten before they were read
    give EPIPE once, and reading goes on. A regular file in the same format works too."""

    def __init__(self, path: Path, boot_id: str, boot_time: float, cursor: dict | None = None):
        self.path, self.boot_id, self.boot_time, self.lines_read, self.bad_records = Path(path), boot_id, boot_time, 0, 0
        self._fd = os.open(self.path, os.O_RDONLY | os.O_NONBLOCK)
        self._lines = _Lines()
        cursor = cursor or {}
        self._seq = int(cursor["seq"]) if cursor.get("boot") == boot_id else -1

    @property
    def cursor(self) -> dict:
        return {"boot": self.boot_id, "seq": self._seq}

    def poll(self) -> list[KernelRecord]:
        out = []
        while len(out) < MAX_RECORDS:
            try:
                data = os.read(self._fd, READ_CHUNK)
            except BlockingIOError:
                return out
            except OSError as exc:
                if exc.errno == errno.EPIPE:
                    continue
                raise
            if not data:
                return out
            for raw in self._lines.feed(data):
                try:
                    record = parse_kmsg(raw.decode("utf-8", "replace"), self.boot_id, self.boot_time)
                except BadRecord:
                    self.bad_records += 1
                    continue
                if record is None:
                    continue
                self.lines_read += 1
                seq = int(record.record_id.rsplit(":", 1)[1])
                if seq <= self._seq:
                    continue  # read before the restart
                self._seq = seq
                out.append(record)
        return out

    def close(self) -> None:
        os.close(self._fd)


class JournalSource:
    """`journalctl -k -f -o json`, from after the saved cursor (else all of this boot)."""

    def __init__(self, argv: Sequence[str], cursor: dict | None = None):
        self.lines_read, self.bad_records = 0, 0
        self._cursor = (cursor or {}).get("cursor")
        where = ["--after-cursor", self._cursor] if self._cursor else ["--no-tail"]
        self._proc = subprocess.Popen([*argv, *where], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
        os.set_blocking(self._proc.stdout.fileno(), False)
        self._lines = _Lines()

    @property
    def cursor(self) -> dict:
        return {"cursor": self._cursor}

    def poll(self) -> list[KernelRecord]:
        out = []
        while len(out) < MAX_RECORDS:
            try:
                data = os.read(self._proc.stdout.fileno(), READ_CHUNK)
            except BlockingIOError:
                return out
            if not data:
                if self._proc.poll() is not None:
                    raise RuntimeError(f"journalctl exited with status {self._proc.returncode}")
                return out
            for raw in self._lines.feed(data):
                try:
                    record = parse_journal_json(raw.decode("utf-8", "replace"))
                except BadRecord:
                    self.bad_records += 1
                    continue
                self.lines_read += 1
                self._cursor = record.record_id.removeprefix("journal:")
                out.append(record)
        return out

    def close(self) -> None:
        self._proc.terminate()
        self._proc.wait(10)
        self._proc.stdout.close()
