"""The spool: what was appended survives a restart until acknowledged, a torn last append
is cut off, and past the bound the oldest go first, counted."""

from __future__ import annotations

import pytest

from fleetctl.agent import spool as spool_module
from fleetctl.agent.spool import Spool


def _events(*ids):
    return [{"event_id": i} for i in ids]


def test_pending_events_survive_a_restart_and_acknowledged_ones_do_not(tmp_path) -> None:
    s = Spool(tmp_path, 100)
    s.append(_events("a", "b", "c"))
    s.ack(1)
    s.close()
    again = Spool(tmp_path, 100)
    assert [e["event_id"] for e in again.pending(10)] == ["b", "c"]
    again.append(_events("d"))
    again.ack(3)
    again.close()
    assert Spool(tmp_path, 100).depth == 0


def test_a_torn_last_append_is_cut_off(tmp_path) -> None:
    s = Spool(tmp_path, 100)
    s.append(_events("a"))
    s.close()
    (seg,) = tmp_path.glob("segment-*.jsonl")
    with open(seg, "a") as f:
        f.write('{"event_id": "half')  # the machine lost power mid-write
    again = Spool(tmp_path, 100)
    assert [e["event_id"] for e in again.pending(10)] == ["a"]
    again.append(_events("b"))
    again.close()
    assert [e["event_id"] for e in Spool(tmp_path, 100).pending(10)] == ["a", "b"]


def test_past_the_bound_the_oldest_are_dropped_and_counted_across_restarts(tmp_path) -> None:
    s = Spool(tmp_path, 3)
    assert s.append(_events("a", "b")) == 0
    assert s.append(_events("c", "d", "e")) == 2
    assert [e["event_id"] for e in s.pending(10)] == ["c", "d", "e"] and s.dropped == 2
    s.close()
    again = Spool(tmp_path, 3)
    assert again.dropped == 2 and [e["event_id"] for e in again.pending(10)] == ["c", "d", "e"]


def test_delivered_segments_are_removed(tmp_path, monkeypatch) -> None:
    monkeypatch.setattr(spool_module, "SEGMENT_EVENTS", 2)
    s = Spool(tmp_path, 100)
    s.append(_events("a", "b", "c", "d", "e"))
    assert len(list(tmp_path.glob("segment-*.jsonl"))) == 3
    s.ack(4)
    assert len(list(tmp_path.glob("segment-*.jsonl"))) == 1
    s.close()
    assert [e["event_id"] for e in Spool(tmp_path, 100).pending(10)] == ["e"]


def test_a_spool_of_nothing_is_refused(tmp_path) -> None:
    with pytest.raises(ValueError):
        Spool(tmp_path, 0)


def _sev(event_id, severity):
    return {"event_id": event_id, "severity": severity}


def test_past_the_bound_minor_events_go_before_critical_ones_and_again_after_a_restart(tmp_path) -> None:
    s = Spool(tmp_path, 3)
    s.append([_sev("79a", "critical"), _sev("13a", "info"), _sev("94a", "warning")])
    assert s.append([_sev("79b", "critical"), _sev("13b", "info")]) == 2
    assert [e["event_id"] for e in s.pending(10)] == ["79a", "79b", "13b"]
    assert s.append([_sev("79c", "critical"), _sev("79d", "critical")]) == 2  # the minor one, then the oldest 79
    assert [e["event_id"] for e in s.pending(10)] == ["79b", "79c", "79d"]
    assert s.dropped == 4 and s.dropped_by_severity == {"critical": 1, "warning": 1, "info": 2, "none": 0}
    s.close()
    again = Spool(tmp_path, 3)  # the tombstones drop the same events again
    assert [e["event_id"] for e in again.pending(10)] == ["79b", "79c", "79d"] and again.dropped_by_severity[
        "info"
    ] == 2


def test_an_ack_counts_the_events_handed_out_even_when_some_were_dropped_since(tmp_path) -> None:
    s = Spool(tmp_path, 3)
    s.append([_sev("a", "info"), _sev("79", "critical")])
    batch = s.pending(10)
    s.append([_sev("b", "info"), _sev("c", "info")])  # drops "a", which is in the batch being sent
    s.ack(len(batch))
    assert [e["event_id"] for e in s.pending(10)] == ["b", "c"]


def test_an_append_the_disk_refuses_leaves_the_spool_as_it_was(tmp_path, monkeypatch) -> None:
    s = Spool(tmp_path, 10)
    s.append(_events("a"))
    real = spool_module.os.fsync
    monkeypatch.setattr(
        spool_module.os, "fsync", lambda fd: (_ for _ in ()).throw(OSError(28, "No space left on device"))
    )
    with pytest.raises(OSError):
        s.append(_events("b"))
    monkeypatch.setattr(spool_module.os, "fsync", real)
    assert [e["event_id"] for e in s.pending(10)] == ["a"]
    s.append(_events("c"))
    s.close()
    assert [e["event_id"] for e in Spool(tmp_path, 10).pending(10)] == ["a", "c"]


def test_a_corrupt_segment_is_moved_aside_and_its_readable_events_kept(tmp_path) -> None:
    s = Spool(tmp_path, 10, valid=lambda ev: isinstance(ev.get("event_id"), str))
    s.append(_events("a", "b"))
    s.close()
    (seg,) = tmp_path.glob("segment-*.jsonl")
    lines = seg.read_bytes().splitlines(keepends=True)
    seg.write_bytes(lines[0] + b'{"event_id": 5}\n' + b"\xff\x00garbage\n" + lines[1])
    again = Spool(tmp_path, 10, valid=lambda ev: isinstance(ev.get("event_id"), str))
    assert [e["event_id"] for e in again.pending(10)] == ["a", "b"]
    (aside,) = again.moved_aside
    assert aside.name.startswith(seg.name + ".corrupt-") and aside.exists() and not seg.exists()
    again.append(_events("c"))
    again.ack(1)
    again.close()
    assert [e["event_id"] for e in Spool(tmp_path, 10).pending(10)] == ["b", "c"]
