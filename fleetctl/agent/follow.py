"""Where the kernel log comes from: /dev/kmsg (or a file in its format), `journalctl -k -f
-o json`, or a plain log file that is rotated and truncated under the agent. Every source
is polled without blocking and says where it got to (its cursor), so a restarted agent
goes on from there; ids, not cursors, are what keep an event from counting twice."""

from __future__ import annotations

import errno
import logging
import os
import subprocess
import time
from collections.abc import Sequence
from pathlib import Path
from typing import TypeGuard

from fleetctl.agent.records import MAX_SEQ, BadRecord, Cursor, KernelRecord, file_record, parse_journal_json, parse_kmsg
from fleetctl.text import bounded

log = logging.getLogger("fleetctl.agent")

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

    def __init__(self, path: Path, cursor: Cursor | None = None, from_end: bool = False):
        self.path, self.lines_read, self.bad_records, self.seq_resets, self.last_bad = Path(path), 0, 0, 0, ""
        self._fd: int | None = None
        self._inode: int | None = None
        self._offset = 0
        self._lines = _Lines()
        self._resume = cursor or {}
        self._from_end = from_end and not cursor

    @property
    def cursor(self) -> Cursor:
        return {"inode": self._inode, "offset": self._offset}

    def _open(self) -> bool:
        try:
            fd = os.open(self.path, os.O_RDONLY)
        except FileNotFoundError:
            return False
        st = os.fstat(fd)
        self._fd, self._inode, self._offset, self._lines = fd, st.st_ino, 0, _Lines()
        offset = self._resume.get("offset")
        if self._resume.get("inode") == st.st_ino and _an_int(offset) and 0 <= offset <= st.st_size:
            self._offset = offset
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
            self.close()
            if self._open():
                out += self._read_to_end()
        elif st.st_size < self._offset + len(self._lines.partial):  # truncated in place
            self._offset, self._lines = 0, _Lines()
            out += self._read_to_end()
        return out

    def _read_to_end(self) -> list[KernelRecord]:
        out: list[KernelRecord] = []
        now = time.time()
        fd, inode = self._fd, self._inode
        if fd is None or inode is None:  # not open: nothing to read
            return out
        while True:
            if len(out) >= MAX_RECORDS:
                return out
            data = os.pread(fd, READ_CHUNK, self._offset + len(self._lines.partial))
            if not data:
                return out
            for raw in self._lines.feed(data):
                line = raw.decode("utf-8", "replace")
                out.append(file_record(line, inode, self._offset, now))
                self._offset += len(raw) + 1
                self.lines_read += 1

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


def _an_int(value: object) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool)


class KmsgSource:
    """/dev/kmsg: each read returns one record; records overwritten before they were read
    give EPIPE once, and reading goes on. A regular file in the same format works too.

    The cursor is the sequence number of the last record read (the kernel's, per boot). Its
    rules, so that no number can make the agent skip the records after it:
      - a sequence number past MAX_SEQ (2**63-1) makes the record unreadable: counted in
        `bad_records`, skipped, the cursor stays;
      - a record at or below the one read just before it in this process (the kernel never
        goes back within a boot: the log was rewritten, or the one before was absurd)
        resets the cursor to it: it and what follows are read;
      - a saved cursor above every record the log holds when the agent starts (the record
        it names is gone although nothing newer came: not this log's cursor) is dropped, and
        the log read again from its first record.
    Each reset is counted in `seq_resets` and logged. A record read twice keeps its id, so
    the node's workflow counts it once."""

    def __init__(self, path: Path, boot_id: str, boot_time: float, cursor: Cursor | None = None):
        self.path, self.boot_id, self.boot_time, self.lines_read, self.bad_records = (
            Path(path),
            boot_id,
            boot_time,
            0,
            0,
        )
        self.seq_resets, self.last_bad = 0, ""  # last_bad: why the last unreadable record was
        self._fd = os.open(self.path, os.O_RDONLY | os.O_NONBLOCK)
        self._lines = _Lines()
        cursor = cursor or {}
        saved = cursor.get("seq") if cursor.get("boot") == boot_id else None
        self._seq = saved if _an_int(saved) and -1 <= saved <= MAX_SEQ else -1
        self._saved = self._seq
        self._checking, self._replayed = self._seq >= 0, False  # the saved cursor not yet seen to be this log's
        self._last: int | None = None  # the sequence number of the last record read in this process

    @property
    def cursor(self) -> Cursor:
        return {"boot": self.boot_id, "seq": self._seq}

    def poll(self) -> list[KernelRecord]:
        out: list[KernelRecord] = []
        while len(out) < MAX_RECORDS:
            try:
                data = os.read(self._fd, READ_CHUNK)
            except BlockingIOError:
                data = b""
            except OSError as exc:
                if exc.errno == errno.EPIPE:
                    continue
                raise
            if not data:
                if self._checking and self._replayed:
                    self._reset(f"the saved cursor {self._saved} is above every record of this boot's log", None)
                    os.lseek(self._fd, 0, os.SEEK_SET)  # /dev/kmsg: back to the oldest record it holds
                    continue
                return out
            now = time.time()
            for raw in self._lines.feed(data):
                try:
                    record = parse_kmsg(raw.decode("utf-8", "replace"), self.boot_id, self.boot_time, now)
                except BadRecord as exc:
                    self.bad_records, self.last_bad = self.bad_records + 1, str(exc)
                    continue
                if record is None:
                    continue
                self.lines_read += 1
                seq = int(record.record_id.rsplit(":", 1)[1])
                if self._last is not None and seq <= self._last:
                    self._reset(f"sequence number {seq} after {self._last}", seq - 1)
                self._last = seq
                if self._checking:
                    self._replayed = True
                    self._checking = seq < self._saved
                if seq <= self._seq:
                    continue  # read before the restart
                self._seq = seq
                out.append(record)
        return out

    def _reset(self, why: str, seq: int | None) -> None:
        """The cursor goes back: to `seq`, or (None) to before the log's first record."""
        self.seq_resets += 1
        log.warning(
            "/dev/kmsg cursor reset (%s): reading on from %s",
            why,
            f"sequence number {seq + 1}" if seq is not None else "the log's first record",
        )
        self._seq = -1 if seq is None else seq
        self._checking = False
        if seq is None:
            self._last, self._lines = None, _Lines()

    def close(self) -> None:
        os.close(self._fd)


class JournalSource:
    """`journalctl -k -f -o json`, from after the saved cursor (else all of this boot)."""

    def __init__(self, argv: Sequence[str], cursor: Cursor | None = None):
        self.lines_read, self.bad_records, self.seq_resets, self.last_bad = 0, 0, 0, ""
        saved = (cursor or {}).get("cursor")
        self._cursor = saved if isinstance(saved, str) and saved and bounded(saved) == saved else None
        where = ["--after-cursor", self._cursor] if self._cursor else ["--no-tail"]
        self._proc = subprocess.Popen([*argv, *where], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
        assert self._proc.stdout is not None  # stdout=PIPE
        self._stdout = self._proc.stdout
        os.set_blocking(self._stdout.fileno(), False)
        self._lines = _Lines()

    @property
    def cursor(self) -> Cursor:
        return {"cursor": self._cursor}

    def poll(self) -> list[KernelRecord]:
        out: list[KernelRecord] = []
        while len(out) < MAX_RECORDS:
            try:
                data = os.read(self._stdout.fileno(), READ_CHUNK)
            except BlockingIOError:
                return out
            if not data:
                if self._proc.poll() is not None:
                    raise RuntimeError(f"journalctl exited with status {self._proc.returncode}")
                return out
            now = time.time()
            for raw in self._lines.feed(data):
                try:
                    record = parse_journal_json(raw.decode("utf-8", "replace"), now)
                except BadRecord as exc:
                    self.bad_records, self.last_bad = self.bad_records + 1, str(exc)
                    continue
                self.lines_read += 1
                self._cursor = record.record_id.removeprefix("journal:")
                out.append(record)
        return out

    def close(self) -> None:
        self._proc.terminate()
        self._proc.wait(10)
        self._stdout.close()
