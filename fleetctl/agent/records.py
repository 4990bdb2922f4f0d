"""Kernel log records, each with the log's own time and an id stable across re-reads.

    /dev/kmsg:        "6,1234,5678901,-;NVRM: Xid (PCI:0000:2b:00): 79, GPU has fallen off the bus."
                      (priority,seq,usec since boot,flags;message; lines that start with a space
                      are the record's KEY=value dictionary)
    journalctl -o json: one object a line with MESSAGE, __CURSOR, __REALTIME_TIMESTAMP (usec)
    a file:           dmesg/syslog lines; the id is the file's inode and the line's offset
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass
from datetime import datetime

# A message longer than this is cut: the kernel's own limit is 1 KiB a record, and nothing
# the agent sends may grow without bound.
MAX_MESSAGE = 2048


@dataclass(frozen=True)
class KernelRecord:
    record_id: str  # stable: the same record read again (after a restart) has the same id
    at: float  # unix time the kernel logged it
    message: str


class BadRecord(ValueError):
    pass


_KMSG = re.compile(r"^(?P<prio>\d{1,5}),(?P<seq>\d{1,20}),(?P<usec>\d{1,20}),(?P<flags>[^;]*);(?P<msg>.*)$", re.S)


def parse_kmsg(line: str, boot_id: str, boot_time: float) -> KernelRecord | None:
    """One /dev/kmsg record; None for a dictionary continuation line. `boot_time` is the unix
    time the machine booted (the record's usec counts from it)."""
    if line.startswith(" "):
        return None
    m = _KMSG.match(line.rstrip("\n"))
    if not m:
        raise BadRecord(f"not a /dev/kmsg record: {line[:80]!r}")
    return KernelRecord(f"kmsg:{boot_id}:{int(m['seq'])}", boot_time + int(m["usec"]) / 1e6, m["msg"][:MAX_MESSAGE])


def parse_journal_json(line: str) -> KernelRecord:
    try:
        entry = json.loads(line)
        cursor, usec = entry["__CURSOR"], int(entry["__REALTIME_TIMESTAMP"])
        message = entry.get("MESSAGE", "")
    except (ValueError, KeyError, TypeError) as exc:
        raise BadRecord(f"not a journal JSON entry ({exc.__class__.__name__})") from None
    if isinstance(message, list):  # journald writes a message that is not UTF-8 as its bytes
        message = bytes(b for b in message if isinstance(b, int) and 0 <= b < 256).decode("utf-8", "replace")
    if not isinstance(cursor, str) or not isinstance(message, str):
        raise BadRecord("not a journal JSON entry (cursor or message of the wrong type)")
    return KernelRecord(f"journal:{cursor}", usec / 1e6, message[:MAX_MESSAGE])


_ISO = re.compile(r"^(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:[.,]\d+)?(?:Z|[+-]\d\d:?\d\d)?)\s")
_SYSLOG = re.compile(r"^([A-Z][a-z]{2}\s+\d{1,2}\s\d\d:\d\d:\d\d)\s")
_DMESG_T = re.compile(r"^\[([A-Z][a-z]{2} [A-Z][a-z]{2}\s+\d{1,2} \d\d:\d\d:\d\d \d{4})\]")


def line_time(line: str, now: float) -> float:
    """The time a log line carries (ISO, syslog or `dmesg -T`), else `now` (when it was read).
    Times without a zone are the machine's local time, as syslog writes them."""
    try:
        if m := _ISO.match(line):
            stamp = datetime.fromisoformat(m[1].replace(",", ".").replace("Z", "+00:00"))
            return (stamp if stamp.tzinfo else stamp.astimezone()).timestamp()
        if m := _DMESG_T.match(line):
            return datetime.strptime(m[1].replace("  ", " "), "%a %b %d %H:%M:%S %Y").astimezone().timestamp()
        if m := _SYSLOG.match(line):
            year = datetime.fromtimestamp(now).year
            stamp = datetime.strptime(f"{year} {' '.join(m[1].split())}", "%Y %b %d %H:%M:%S").astimezone()
            if stamp.timestamp() > now + 86400:  # December's line read in January
                stamp = stamp.replace(year=year - 1)
            return stamp.timestamp()
    except ValueError:
        pass
    return now


def file_record(line: str, inode: int, offset: int, now: float) -> KernelRecord:
    digest = hashlib.sha256(line.encode("utf-8", "replace")).hexdigest()[:16]
    return KernelRecord(f"file:{inode}:{offset}:{digest}", line_time(line, now), line.rstrip("\n")[:MAX_MESSAGE])


def event_id(node: str, record_id: str, index: int) -> str:
    """The id the node's workflow de-duplicates by: one per fault found in one record."""
    return hashlib.sha256(f"{node}/{record_id}/{index}".encode()).hexdigest()[:32]
