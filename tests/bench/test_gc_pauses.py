"""The critical-lane benchmark's record of a worker's garbage collections: the probe a worker
imports at start-up writes each one, and the summary counts the trials they overlapped."""

from __future__ import annotations

import subprocess
import sys

import pytest

from bench.critical_lane import GC_PROBE, gc_pauses


def test_a_process_started_with_the_probe_records_each_collection(tmp_path) -> None:
    subprocess.run(
        [sys.executable, "-c", "import gc, os; gc.collect(); gc.collect(0); print(os.getpid())"],
        env={"PYTHONPATH": str(GC_PROBE), "FLEETCTL_BENCH_GC_DIR": str(tmp_path), "PATH": "/usr/bin:/bin"},
        check=True,
    )
    (record,) = tmp_path.iterdir()
    rows = [line.split() for line in record.read_text().splitlines()]
    generations = "".join(g for g, _, _ in rows)
    assert "20" in generations, generations  # the two asked for, one after the other
    assert all(float(at) > 0 and float(ms) >= 0 for _, at, ms in rows)


def test_without_a_directory_the_probe_records_nothing(tmp_path) -> None:
    subprocess.run(
        [sys.executable, "-c", "import gc; gc.collect()"],
        env={"PYTHONPATH": str(GC_PROBE), "PATH": "/usr/bin:/bin"},
        cwd=tmp_path,
        check=True,
    )
    assert not list(tmp_path.iterdir())


def _trial(path: str, sent_at: float, out_at: float) -> dict:
    return {"path": path, "sent_at": sent_at, "out_at": out_at}


@pytest.mark.parametrize(
    ("collections", "idle_overlapped", "idle_ms", "sweep_overlapped", "sweep_ms"),
    [
        ("", 0, 0.0, 0, 0.0),
        # A full collection across the idle trial's end: the part inside it counts.
        ("2 100.040 20.0\n", 1, 10.0, 0, 0.0),
        # One between the trials (the restart's), one before the first: neither counts.
        ("2 100.200 50.0\n0 99.000 1.0\n", 0, 0.0, 0, 0.0),
        # Two inside the sweep trial.
        ("0 200.010 2.0\n1 200.020 4.0\n", 0, 0.0, 1, 6.0),
    ],
)
def test_the_summary_counts_the_trials_a_collection_overlapped(
    tmp_path, collections, idle_overlapped, idle_ms, sweep_overlapped, sweep_ms
) -> None:
    (tmp_path / "41").write_text(collections)
    samples = [_trial("warm-up", 99.0, 99.05), _trial("idle", 100.0, 100.05), _trial("sweep", 200.0, 200.05)]
    summary = gc_pauses(tmp_path, {"worker_critical": 41, "worker_bulk": 42}, samples)
    for path, overlapped, ms in (("idle", idle_overlapped, idle_ms), ("sweep", sweep_overlapped, sweep_ms)):
        assert summary["trials"][path] == {"trials_overlapped": overlapped, "overlap_ms_p50": ms, "overlap_ms_max": ms}
    assert summary["workers"]["worker_bulk"]["gen2"] == {"count": 0, "total_ms": 0.0, "max_ms": 0.0}


def test_the_summary_counts_each_generation_of_each_worker(tmp_path) -> None:
    (tmp_path / "41").write_text("0 100.001 1.5\n0 100.002 0.5\n2 100.010 30.0\n")
    summary = gc_pauses(tmp_path, {"worker_critical": 41}, [_trial("idle", 100.0, 100.05)])
    gens = summary["workers"]["worker_critical"]
    assert gens["gen0"] == {"count": 2, "total_ms": 2.0, "max_ms": 1.5}
    assert gens["gen1"]["count"] == 0
    assert gens["gen2"] == {"count": 1, "total_ms": 30.0, "max_ms": 30.0}
