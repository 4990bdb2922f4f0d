"""The journal source: `journalctl -k -f -o json` output read as records with their cursors,
resumed after the cursor on restart. journald itself runs only where systemd does."""

from __future__ import annotations

import json
import os
import shutil
import sys
import time
import uuid
from pathlib import Path

import pytest

from fleetctl.agent.follow import JournalSource
from tests.support.services import not_on_this_kind_of_machine

JOURNALD_SOCKET = Path("/run/systemd/journal/socket")


def entry(i: int, message: str) -> str:
    return (
        json.dumps(
            {
                "__CURSOR": f"s=feed;i={i:x}",
                "__REALTIME_TIMESTAMP": str(1_700_000_000_000_000 + i),
                "_TRANSPORT": "kernel",
                "MESSAGE": message,
            }
        )
        + "\n"
    )


def poll_until(src: JournalSource, count: int, timeout_s: float = 20.0) -> list:
    records, deadline = [], time.monotonic() + timeout_s
    while len(records) < count and time.monotonic() < deadline:
        records += src.poll()
        time.sleep(0.02)
    return records


def test_journal_records_and_a_restart_after_the_cursor(tmp_path) -> None:
    """A stand-in journalctl that prints the journal's JSON from a file, as `-f` would, and
    writes down the arguments it was given."""
    journal, argv_log = tmp_path / "journal.json", tmp_path / "argv"
    journal.write_text(entry(1, "NVRM: Xid (PCI:0000:2b:00): 13, pid=1, name=x, a") + "not json\n" + entry(2, "b"))
    fake = tmp_path / "journalctl"
    fake.write_text(
        f"#!{sys.executable}\nimport sys, time\nopen({str(argv_log)!r}, 'a').write(' '.join(sys.argv[1:]) + '\\n')\n"
        f"sys.stdout.write(open({str(journal)!r}).read()); sys.stdout.flush(); time.sleep(60)\n"
    )
    fake.chmod(0o755)
    src = JournalSource([str(fake), "-k", "-f", "-o", "json"])
    records = poll_until(src, 2)
    src.close()
    assert [r.message for r in records][1] == "b" and records[0].at == pytest.approx(1_700_000_000.000001)
    assert src.bad_records == 1 and src.cursor == {"cursor": "s=feed;i=2"}
    again = JournalSource([str(fake), "-k", "-f", "-o", "json"], src.cursor)
    poll_until(again, 2)  # it has started (and written its arguments down)
    again.close()
    assert argv_log.read_text().splitlines() == ["-k -f -o json --no-tail", "-k -f -o json --after-cursor s=feed;i=2"]


def test_real_journald_kernel_lines() -> None:
    if not JOURNALD_SOCKET.exists() or shutil.which("journalctl") is None:
        not_on_this_kind_of_machine(
            "journald",
            f"no systemd as PID 1 ({JOURNALD_SOCKET} is missing); the stand-in journalctl test covers the parsing",
        )
    if not os.access("/dev/kmsg", os.W_OK):
        not_on_this_kind_of_machine("writing a kernel line", "/dev/kmsg is not writable (needs root)")
    marker = f"fleetctl-agent-test {uuid.uuid4().hex}"
    src = JournalSource(["journalctl", "-k", "-f", "-o", "json"])
    try:
        with open("/dev/kmsg", "w") as kmsg:
            kmsg.write(f"<4>{marker}\n")
        deadline, found = time.monotonic() + 30, []
        while not found and time.monotonic() < deadline:
            found = [r for r in src.poll() if marker in r.message]
            time.sleep(0.05)
    finally:
        src.close()
    assert found and abs(found[0].at - time.time()) < 60
