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
from typing import Any

from fleetctl.nodes.health import health_event_id
from fleetctl.text import bounded

# /dev/kmsg's sequence number is the kernel's u64; the agent keeps it in a signed 64-bit
# range (what a JSON reader in any language holds). A record past it is unreadable: counted
# and skipped, it never moves the cursor.
MAX_SEQ = 2**63 - 1
# Microseconds since boot past this (~31 years of uptime) are not a time: the record is read
# with the time it was read at.
MAX_USEC = 10**15
MAX_REALTIME_USEC = 4_102_444_800 * 10**6  # 2100-01-01, as checks/xid.py bounds it


# A source's read position, saved in the spool directory as JSON (runner.valid_cursor).
Cursor = dict[str, Any]


@dataclass(frozen=True)
class KernelRecord:
    record_id: str  # stable: the same record read again (after a restart) has the same id
    at: float  # unix time the kernel logged it
    message: str


class BadRecord(ValueError):
    pass


_KMSG = re.compile(r"^(?P<prio>\d{1,5}),(?P<seq>\d{1,20}),(?P<usec>\d{1,20}),(?P<flags>[^;]*);(?P<msg>.*)$", re.S)


def parse_kmsg(line: str, boot_id: str, boot_time: float, now: float | None = None) -> KernelRecord | None:
    """One /dev/kmsg record; None for a dictionary continuation line. `boot_time` is the unix
    time the machine booted (the record's usec counts from it); `now`, the time it was read,
    stands in for a usec past MAX_USEC (else the boot's time does). A sequence number past
    MAX_SEQ is a BadRecord: the record has no id the cursor can hold."""
    if line.startswith(" "):
        return None
    m = _KMSG.match(line.rstrip("\n"))
    if not m:
        raise BadRecord(f"not a /dev/kmsg record: {bounded(line, 80)!r}")
    seq, usec = int(m["seq"]), int(m["usec"])
    if seq > MAX_SEQ:
        raise BadRecord(f"/dev/kmsg sequence number {m['seq']} is past {MAX_SEQ}")
    at = boot_time + usec / 1e6 if usec <= MAX_USEC else (boot_time if now is None else now)
    return KernelRecord(f"kmsg:{boot_id}:{seq}", at, bounded(m["msg"]))


def parse_journal_json(line: str, now: float | None = None) -> KernelRecord:
    """One `journalctl -o json` entry; `now` (the time it was read) stands in for a
    __REALTIME_TIMESTAMP past MAX_REALTIME_USEC (without it, such an entry is a BadRecord)."""
    try:
        entry = json.loads(line)
        cursor, usec = entry["__CURSOR"], int(entry["__REALTIME_TIMESTAMP"])
        message = entry.get("MESSAGE", "")
    except (ValueError, KeyError, TypeError, OverflowError, RecursionError) as exc:
        raise BadRecord(f"not a journal JSON entry ({exc.__class__.__name__})") from None
    if isinstance(message, list):  # journald writes a message that is not UTF-8 as its bytes
        message = bytes(b for b in message if isinstance(b, int) and 0 <= b < 256).decode("utf-8", "replace")
    if not isinstance(cursor, str) or not isinstance(message, str):
        raise BadRecord("not a journal JSON entry (cursor or message of the wrong type)")
    if not cursor or bounded(cursor) != cursor:
        raise BadRecord("not a journal JSON entry (a cursor journalctl cannot have written)")
    at = usec / 1e6
    if not 0 <= usec <= MAX_REALTIME_USEC:
        if now is None:
            raise BadRecord("not a journal JSON entry (__REALTIME_TIMESTAMP out of range)")
        at = now
    return KernelRecord(f"journal:{cursor}", at, bounded(message))


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
    return KernelRecord(f"file:{inode}:{offset}:{digest}", line_time(line, now), bounded(line.rstrip("\n")))


def event_id(node: str, record_id: str, index: int) -> str:
    """The id the node's workflow de-duplicates by: one per fault found in one record."""
    return health_event_id(node, record_id, index)
