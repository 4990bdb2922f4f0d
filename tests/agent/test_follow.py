"""The sources read what the test writes: a log file rotated and truncated under the
follower, and a file in /dev/kmsg's record format."""

from __future__ import annotations

import os
from pathlib import Path

from fleetctl.agent.follow import FileSource, KmsgSource
from tests.support.services import not_on_this_kind_of_machine


def _append(path, text: str) -> None:
    with open(path, "a") as f:
        f.write(text)


def test_a_partial_line_waits_for_its_end(tmp_path) -> None:
    log = tmp_path / "kern.log"
    _append(log, "first\nsec")
    src = FileSource(log)
    assert [r.message for r in src.poll()] == ["first"]
    _append(log, "ond\n")
    assert [r.message for r in src.poll()] == ["second"]
    assert src.poll() == []


def test_rotation_reads_the_old_file_to_its_end_then_the_new_one(tmp_path) -> None:
    log = tmp_path / "kern.log"
    _append(log, "a\n")
    src = FileSource(log)
    assert [r.message for r in src.poll()] == ["a"]
    _append(log, "b\n")  # written after the last poll, before the rotation
    os.rename(log, tmp_path / "kern.log.1")
    _append(log, "c\n")
    assert [r.message for r in src.poll()] == ["b", "c"]
    _append(log, "d\n")
    assert [r.message for r in src.poll()] == ["d"]


def test_rotation_with_the_new_file_not_there_yet(tmp_path) -> None:
    log = tmp_path / "kern.log"
    _append(log, "a\n")
    src = FileSource(log)
    src.poll()
    os.rename(log, tmp_path / "kern.log.1")
    assert src.poll() == []
    _append(log, "b\n")
    assert [r.message for r in src.poll()] == ["b"]


def test_truncation_reads_again_from_the_start(tmp_path) -> None:
    log = tmp_path / "kern.log"
    _append(log, "aaaa\nbbbb\n")
    src = FileSource(log)
    assert len(src.poll()) == 2
    with open(log, "w") as f:  # copytruncate
        f.write("c\n")
    assert [r.message for r in src.poll()] == ["c"]


def test_a_restart_resumes_at_the_cursor_with_the_same_ids(tmp_path) -> None:
    log = tmp_path / "kern.log"
    _append(log, "a\nb\n")
    first = FileSource(log)
    ids = [r.record_id for r in first.poll()]
    cursor = first.cursor
    first.close()
    _append(log, "c\n")
    again = FileSource(log, cursor)
    assert [r.message for r in again.poll()] == ["c"]
    assert [r.record_id for r in FileSource(log).poll()][:2] == ids  # from the start: the same ids


def test_a_cursor_of_another_file_starts_that_file_from_the_start(tmp_path) -> None:
    log = tmp_path / "kern.log"
    _append(log, "a\n")
    assert [r.message for r in FileSource(log, {"inode": -1, "offset": 1}).poll()] == ["a"]


def test_from_end_skips_the_history(tmp_path) -> None:
    log = tmp_path / "kern.log"
    _append(log, "old\n")
    src = FileSource(log, from_end=True)
    assert src.poll() == []
    _append(log, "new\n")
    assert [r.message for r in src.poll()] == ["new"]


def test_kmsg_records_skip_dictionary_lines_bad_lines_and_what_was_read_before(tmp_path) -> None:
    kmsg = tmp_path / "kmsg"
    _append(kmsg, "6,1,100,-;hello\n SUBSYSTEM=pci\n DEVICE=+pci:0000:2b:00.0\ngarbage\n4,2,2000000,-;NVRM: x\n")
    src = KmsgSource(kmsg, "boot-a", 1000.0)
    records = src.poll()
    assert [(r.message, r.at) for r in records] == [("hello", 1000.0001), ("NVRM: x", 1002.0)]
    assert src.bad_records == 1 and src.cursor == {"boot": "boot-a", "seq": 2}
    src.close()
    _append(kmsg, "4,3,3000000,-;later\n")
    again = KmsgSource(kmsg, "boot-a", 1000.0, {"boot": "boot-a", "seq": 2})
    assert [r.message for r in again.poll()] == ["later"]
    other_boot = KmsgSource(kmsg, "boot-b", 1000.0, {"boot": "boot-a", "seq": 2})
    assert len(other_boot.poll()) == 3


def test_a_large_log_is_read_in_bounded_pieces_before_a_rotation_is_followed(tmp_path, monkeypatch) -> None:
    from fleetctl.agent import follow

    monkeypatch.setattr(follow, "MAX_RECORDS", 100)
    log = tmp_path / "kern.log"
    pad = "x" * 1000  # 64 lines a read
    _append(log, "".join(f"line {i} {pad}\n" for i in range(250)))
    src = FileSource(log)
    first = src.poll()
    assert 100 <= len(first) < 250
    os.rename(log, tmp_path / "kern.log.1")
    _append(log, "new\n")
    rest = []
    for _ in range(5):
        rest += src.poll()
    assert [r.message for r in first + rest] == [f"line {i} {pad}" for i in range(250)] + ["new"]


def test_the_real_dev_kmsg_reads_as_records_between_boot_and_now() -> None:
    if not os.access("/dev/kmsg", os.R_OK):
        not_on_this_kind_of_machine("reading /dev/kmsg", "it is not readable here (needs CAP_SYSLOG)")
    import time

    from fleetctl.agent.runner import boot_identity

    boot_id, boot_time = boot_identity()
    src = KmsgSource(Path("/dev/kmsg"), boot_id, boot_time)
    try:
        records = src.poll()
    finally:
        src.close()
    assert records and src.bad_records == 0
    assert all(boot_time - 1 <= r.at <= time.time() + 1 for r in records)
    seqs = [int(r.record_id.rsplit(":", 1)[1]) for r in records]
    assert seqs == sorted(seqs) and len(set(seqs)) == len(seqs)
