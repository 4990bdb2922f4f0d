"""What every benchmark shares: the machine it ran on, summaries of samples, result files."""

from __future__ import annotations

import json
import math
import os
import platform
import random
import statistics
import subprocess
import sys
from collections.abc import Sequence
from datetime import UTC, datetime
from importlib import metadata
from pathlib import Path

RESULTS_DIR = Path(__file__).parent / "results"


class CannotMeasure(RuntimeError):
    """The benchmark could not take its measurement (a missing tool, a run that broke).

    Only this makes `bench.run` exit non-zero; a slow figure is a figure."""


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def _memory_gib() -> float | None:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                return round(int(line.split()[1]) / 2**20, 1)
    except OSError:
        pass
    return None


def _temporal_cli_version() -> str:
    from fleetctl.connections.temporal_server import TemporalBinaryMissing, temporal_binary

    try:
        out = subprocess.run([str(temporal_binary()), "--version"], capture_output=True, text=True, timeout=30)
    except (TemporalBinaryMissing, OSError, subprocess.TimeoutExpired) as exc:
        return f"unavailable ({exc.__class__.__name__})"
    return out.stdout.strip()


def machine() -> dict:
    """The machine and software the figures belong to."""
    return {
        "nproc": os.cpu_count(),
        "memory_gib": _memory_gib(),
        "cpu_model": _cpu_model(),
        "kernel": platform.release(),
        "python": sys.version.split()[0],
        "temporalio": metadata.version("temporalio"),
        "temporal_cli": _temporal_cli_version(),
    }


def load() -> list[float]:
    """1, 5 and 15 minute load averages: the machine is shared, so figures carry it."""
    return [round(x, 2) for x in os.getloadavg()]


def now_iso() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


def percentile(samples: Sequence[float], q: float) -> float:
    """Linear-interpolated percentile (q in 0..100), as numpy's default."""
    ordered = sorted(samples)
    if not ordered:
        raise ValueError("no samples")
    rank = (len(ordered) - 1) * q / 100
    low, high = math.floor(rank), math.ceil(rank)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


# Resamples of a bootstrap interval: enough that the interval's ends move by less than their
# rounding between seeds, few enough to take well under a second for 40 samples a side.
RESAMPLES = 4000


def ratio_interval(
    slow: Sequence[float], base: Sequence[float], q: float, level: float = 0.9, seed: int = 0
) -> tuple[float, float]:
    """The `level` bootstrap interval of percentile(slow, q) / percentile(base, q): each side
    resampled with replacement RESAMPLES times (seeded, so a result file is reproducible from
    its samples). Two runs of one configuration whose ratios differ inside it differ by chance."""
    rng = random.Random(seed)
    ratios = sorted(
        percentile(rng.choices(slow, k=len(slow)), q) / percentile(rng.choices(base, k=len(base)), q)
        for _ in range(RESAMPLES)
    )
    tail = (1 - level) / 2 * 100
    return round(percentile(ratios, tail), 2), round(percentile(ratios, 100 - tail), 2)


def summary(samples: Sequence[float], digits: int = 4) -> dict:
    return {
        "n": len(samples),
        "min": round(min(samples), digits),
        "p50": round(percentile(samples, 50), digits),
        "p95": round(percentile(samples, 95), digits),
        "max": round(max(samples), digits),
        "mean": round(statistics.fmean(samples), digits),
    }


def rounded(samples: Sequence[float], digits: int = 4) -> list[float]:
    return [round(s, digits) for s in samples]


def rss_mib(pid: int, peak: bool = False) -> float | None:
    """Resident memory of a process now, or its peak so far, from /proc (None when it is gone)."""
    field = "VmHWM:" if peak else "VmRSS:"
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith(field):
                return round(int(line.split()[1]) / 1024, 1)
    except OSError:
        pass
    return None


def write_result(name: str, result: dict) -> Path:
    RESULTS_DIR.mkdir(exist_ok=True)
    path = RESULTS_DIR / f"{name}.json"
    path.write_text(json.dumps(result, indent=1, default=str) + "\n")
    return path
