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
