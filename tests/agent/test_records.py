"""Kernel log records: each keeps the log's own time and an id that is the same when the
record is read again (the node's workflow de-duplicates by it)."""

from __future__ import annotations

import hashlib
import json
from datetime import datetime

import pytest

from fleetctl.agent.detect import UnreadableRecord, detect
from fleetctl.agent.records import BadRecord, event_id, file_record, line_time, parse_journal_json, parse_kmsg
from fleetctl.checks.xid_policy import CATALOG
from fleetctl.nodes.health import health_event_id

BOOT = 1_700_000_000.0
XID79 = "NVRM: Xid (PCI:0000:2b:00): 79, pid=1234, name=python, GPU has fallen off the bus."


def test_a_kmsg_record_keeps_its_own_time_and_sequence() -> None:
    r = parse_kmsg(f"3,812,5000123,-;{XID79}\n", "boot-a", BOOT)
    assert r.at == pytest.approx(BOOT + 5.000123)
    assert r.record_id == "kmsg:boot-a:812" and r.message == XID79


def test_a_kmsg_dictionary_line_is_not_a_record() -> None:
    assert parse_kmsg(" SUBSYSTEM=pci", "b", BOOT) is None


@pytest.mark.parametrize("line", ["hello", "3,x,1,-;m", "3,1,2;no flags separator"])
def test_a_line_that_is_not_kmsg_is_refused(line) -> None:
    with pytest.raises(BadRecord):
        parse_kmsg(line, "b", BOOT)


def test_a_journal_entry_keeps_its_cursor_and_realtime() -> None:
    entry = {"__CURSOR": "s=abc;i=1f", "__REALTIME_TIMESTAMP": "1716058959123456", "MESSAGE": XID79}
    r = parse_journal_json(json.dumps(entry))
    assert r.record_id == "journal:s=abc;i=1f" and r.at == pytest.approx(1716058959.123456) and r.message == XID79


def test_a_journal_message_that_is_not_utf8_comes_as_bytes() -> None:
    entry = {"__CURSOR": "c", "__REALTIME_TIMESTAMP": "1", "MESSAGE": list(b"NVRM: \xff ok")}
    assert parse_journal_json(json.dumps(entry)).message == "NVRM: \ufffd ok"


@pytest.mark.parametrize("line", ["{}", "not json", '{"__CURSOR": 5, "__REALTIME_TIMESTAMP": "1"}'])
def test_a_bad_journal_line_is_refused(line) -> None:
    with pytest.raises(BadRecord):
        parse_journal_json(line)


def test_file_lines_carry_their_timestamps() -> None:
    now = datetime(2024, 8, 30, 12, 0, 0).astimezone().timestamp()
    assert line_time("2024-05-18T19:02:39.500000+00:00 host kernel: x", now) == pytest.approx(1716058959.5)
    assert (
        line_time("[Fri Aug 30 11:43:14 2024] NVRM: x", now)
        == datetime(2024, 8, 30, 11, 43, 14).astimezone().timestamp()
    )
    assert (
        line_time("Aug 30 11:43:14 host kernel: x", now) == datetime(2024, 8, 30, 11, 43, 14).astimezone().timestamp()
    )
    assert line_time("no stamp at all", now) == now


def test_a_december_syslog_line_read_in_january_is_last_year() -> None:
    now = datetime(2025, 1, 1, 0, 5).astimezone().timestamp()
    assert line_time("Dec 31 23:59:00 host kernel: x", now) == datetime(2024, 12, 31, 23, 59).astimezone().timestamp()


def test_file_record_ids_depend_on_inode_offset_and_text() -> None:
    a = file_record("x\n", 7, 100, 0.0)
    assert a.record_id == file_record("x\n", 7, 100, 5.0).record_id
    assert (
        len(
            {
                a.record_id,
                file_record("y\n", 7, 100, 0).record_id,
                file_record("x\n", 8, 100, 0).record_id,
                file_record("x\n", 7, 101, 0).record_id,
            }
        )
        == 4
    )


def test_event_ids_are_stable_and_distinct() -> None:
    assert event_id("n1", "kmsg:b:1", 0) == event_id("n1", "kmsg:b:1", 0)
    assert len({event_id("n1", "kmsg:b:1", 0), event_id("n2", "kmsg:b:1", 0), event_id("n1", "kmsg:b:2", 0)}) == 3


def test_detect_reads_xids_through_the_checks_parser() -> None:
    (fault,) = detect(XID79, CATALOG)
    assert fault.code == 79 and "fallen off the bus" in fault.message and "0000:2b:00" in fault.message
    assert detect("usb 1-1: new high-speed USB device", CATALOG) == []


def test_detect_names_the_catalog_signature_of_a_fault_without_an_xid() -> None:
    """The node's workflow reads a fault of an NVLink domain's fabric by its signature (a fatal
    SXid holds the domain): the real Fabric Manager guide line, from the cited fixture."""
    (fatal,) = detect(
        "[131453.740743] nvidia-nvswitch0: SXid (PCI:0000:00:00.0): 20034, Fatal, Link 30 LTSSM Fault Up", CATALOG
    )
    assert (fatal.code, fatal.signature, fatal.severity) == (None, "nvswitch_sxid_fatal", "critical")
    (xid,) = detect(XID79, CATALOG)
    assert xid.signature == ""  # an Xid is judged by its code


def test_detect_refuses_a_code_too_large_for_the_database() -> None:
    with pytest.raises(UnreadableRecord, match="out of range"):
        detect("NVRM: Xid (PCI:0000:2b:00): 99999999999, boom", CATALOG)


def test_every_text_is_bounded_and_encodable_before_it_is_spooled(tmp_path) -> None:
    """A megabyte kernel line with NUL and bytes that are not UTF-8, and a journal entry
    whose MESSAGE holds a lone surrogate: each event the agent spools is at most MAX_TEXT
    characters and encodes as UTF-8."""
    from fleetctl.agent.follow import FileSource
    from fleetctl.agent.runner import Agent, AgentConfig
    from fleetctl.text import MAX_TEXT

    log = tmp_path / "kern.log"
    log.write_bytes(f"{XID79} ".encode() + b"\x00\xff\xfe" + b"A" * 1_000_000 + b"\n")
    agent = Agent(AgentConfig(node="n1", spool_dir=tmp_path / "spool"), FileSource(log), transport=None)
    journal = parse_journal_json(
        json.dumps({"__CURSOR": "c", "__REALTIME_TIMESTAMP": "1", "MESSAGE": XID79 + " \ud800"})
    )
    events = agent.events_of([*agent.source.poll(), journal])
    assert [e["code"] for e in events] == [79, 79] and [e["signature"] for e in events] == ["", ""]
    for e in events:
        assert len(e["message"]) <= MAX_TEXT and "\x00" not in e["message"]
        e["message"].encode("utf-8")
    agent.spool.append(events)
    agent.spool.close()


def test_every_sender_derives_an_event_id_one_way() -> None:
    """The agent's ids are the one derivation's (health_event_id): an id an agent sent before is
    the same id now, so a re-sent record is still one event."""
    assert (
        event_id("n1", "kmsg:b:1", 0)
        == health_event_id("n1", "kmsg:b:1", 0)
        == (hashlib.sha256(b"n1/kmsg:b:1/0").hexdigest()[:32])
    )
