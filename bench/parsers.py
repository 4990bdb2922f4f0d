"""Parser throughput: MB/s of `checks.judge` (parse and judge, what the worker runs) on
nccl-tests, HPL, dcgmi diag and kernel-log output.

Two shapes per tool: the real fixtures of tests/fixtures/checks (small: per-call overhead
dominates), and a large log built from those fixtures' lines the way big logs really grow
(NCCL_DEBUG=INFO lines, HPL progress lines, a long-running host's dmesg with XIDs on
varied GPUs). dcgmi diag output does not grow with run length (one table per run), so it
has no large shape.
"""

from __future__ import annotations

import random
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench.harness import CannotMeasure, rounded, summary

FIXTURES = Path(__file__).resolve().parents[1] / "tests" / "fixtures" / "checks"
SMALL_CASES = {
    "nccl": ("nccl/8xh100_full_sweep_ok.txt", "nccl/8xh100_srun_prefix_info_noise_ok.txt"),
    "hpl": ("hpl/nvidia_8xh100_ok.txt", "hpl/nvidia_8xh100_progress_and_nccl_noise_ok.txt"),
    "dcgm": ("dcgm/r2_h100_text_ok.txt", "dcgm/r3_json_gpu5_warn_stress_skipped_error.txt"),
    "xid": ("xid/dmesg_T_xid119_gsp_fail.txt", "xid/journal_xid79_nvlink_fail.txt"),
}
PROFILE = "h100-sxm"
SMALL_SECONDS = 0.5  # judge each fixture repeatedly for this long
LARGE_REPEATS = 3
# Large-log sizes (MB): the bar is a 100 MB dmesg in seconds, not minutes.
LARGE_MB = {"nccl": 20, "hpl": 20, "xid": 100}
LARGE_MB_QUICK = {"nccl": 5, "hpl": 5, "xid": 100}


def _fixture(relative: str) -> str:
    path = FIXTURES / relative
    if not path.exists():
        raise CannotMeasure(f"fixture {path} is missing")
    return path.read_text()


def _judge_timed(kind: str, text: str) -> tuple[float, str]:
    from fleetctl.checks import judge

    started = time.perf_counter()
    result = judge(kind, text, PROFILE)
    return time.perf_counter() - started, result.status.value


def small_throughput(kind: str, relative: str) -> dict:
    text = _fixture(relative)
    mb = len(text.encode()) / 1e6
    calls, elapsed, status = 0, 0.0, ""
    while elapsed < SMALL_SECONDS:
        seconds, status = _judge_timed(kind, text)
        calls += 1
        elapsed += seconds
    return {
        "fixture": relative,
        "bytes": len(text.encode()),
        "status": status,
        "calls": calls,
        "calls_per_s": round(calls / elapsed, 1),
        "mb_per_s": round(mb * calls / elapsed, 2),
    }


def _until(lines: list[str], target_bytes: int, make_line) -> list[str]:
    size = sum(len(line) + 1 for line in lines)
    while size < target_bytes:
        line = make_line()
        lines.append(line)
        size += len(line) + 1
    return lines


def large_nccl(megabytes: float, rng: random.Random) -> str:
    """An srun-prefixed all_reduce_perf run with NCCL_DEBUG=INFO: INFO lines from every rank
    before and between the result rows, as a large job's log really is."""
    lines = _fixture("nccl/8xh100_srun_prefix_info_noise_ok.txt").splitlines()
    first_row = next(i for i, line in enumerate(lines) if re.match(r"\s*0:\s+\d+\s+\d+\s+float", line))
    head, table = lines[:first_row], lines[first_row:]

    def info() -> str:
        rank, channel = rng.randrange(8), rng.randrange(32)
        pid = 204100 + rank
        return rng.choice(
            (
                f"gpu-n017:{pid}:{pid + 17} [{rank}] NCCL INFO Channel {channel:02d}/0 : {rank}[{rank}] -> "
                f"{(rank + 1) % 8}[{(rank + 1) % 8}] via P2P/CUMEM/read",
                f"gpu-n017:{pid}:{pid + 17} [{rank}] NCCL INFO Connected all rings, channel {channel:02d}",
                f"gpu-n017:{pid}:{pid} [{rank}] NCCL INFO comm 0x55d1c3a{rank} rank {rank} nranks 8 cudaDev {rank} "
                f"nvmlDev {rank} busId {0x18 + 0x20 * rank:x}000 commId 0x9e1b{channel:04x} - Init COMPLETE",
            )
        )

    noise = _until([], int(megabytes * 1e6) - sum(len(line) + 1 for line in lines), info)
    per_line = len(noise) // len(table) + 1
    body = []
    for index, row in enumerate(table):
        body += [*noise[index * per_line : (index + 1) * per_line], row]
    return "\n".join(head + body) + "\n"


def large_hpl(megabytes: float, rng: random.Random) -> str:
    """A long HPL-NVIDIA run: thousands of `Prog=` progress lines before the result."""
    lines = _fixture("hpl/nvidia_8xh100_progress_and_nccl_noise_ok.txt").splitlines()
    first_progress = next(i for i, line in enumerate(lines) if "Prog=" in line)
    result_at = next(i for i in range(first_progress, len(lines)) if "Prog=" not in lines[i])
    state = {"elapsed": 0.0}

    def progress() -> str:
        state["elapsed"] += 0.86
        done = min(99.99, state["elapsed"] / 50.0)
        gf = 326480.0 + rng.uniform(-900, 900)
        return (
            f" Prog= {done:.2f}%\tN_left= {int(300000 * (1 - done / 100))}\tTime= {state['elapsed']:.2f}\t"
            f"Time_left= {max(0.0, 50 - state['elapsed']):.2f}\tiGF= {gf + 6500:.2f}\tGF= {gf:.2f}\t"
            f"iGF_per= {(gf + 6500) / 8:.2f}\tGF_per= {gf / 8:.2f}"
        )

    rest = int(megabytes * 1e6) - sum(len(line) + 1 for line in lines)
    return "\n".join(lines[:first_progress] + _until([], rest, progress) + lines[result_at:]) + "\n"


_XID_TAIL = re.compile(r"NVRM: Xid \(PCI:[^)]*\): (.*)$")


# Lines of the xid fixtures that report a GPU failure without an Xid number: a healthy
# host's log does not repeat them, so they stay out of the ordinary lines.
_FAILURE_SIGNATURE = re.compile(
    r"SXid|NV_ERR_RESET_REQUIRED|GspRmAlloc failed|RxDet|Rx Detect|fallen off the bus|waiting for RPC"
)


def large_dmesg(megabytes: float, rng: random.Random) -> str:
    """A long-running host's `dmesg`: ordinary kernel lines with, now and then, an XID line
    (every kind in the fixtures) on one of 64 GPUs across 8 PCI domains."""
    ordinary, xids = [], []
    for path in sorted((FIXTURES / "xid").glob("*.txt")):
        for line in path.read_text().splitlines():
            if m := _XID_TAIL.search(line):
                xids.append(m[1])
            elif line.startswith("[") and not _FAILURE_SIGNATURE.search(line):
                ordinary.append(line.split("]", 1)[1])
    if not ordinary or not xids:
        raise CannotMeasure("the xid fixtures hold no kernel lines to build a dmesg from")
    state = {"t": 0.0}

    def line() -> str:
        state["t"] += rng.expovariate(50.0)
        stamp = f"[{state['t']:12.6f}]"
        if rng.random() < 0.02:
            pci = f"{rng.randrange(8):04x}:{rng.choice((0x18, 0x2A, 0x3A, 0x5D, 0x9A, 0xAB, 0xBA, 0xDB)):02x}:00"
            return f"{stamp} NVRM: Xid (PCI:{pci}): {rng.choice(xids)}"
        return stamp + rng.choice(ordinary)

    return "\n".join(_until([], int(megabytes * 1e6), line)) + "\n"


LARGE_BUILDERS = {"nccl": large_nccl, "hpl": large_hpl, "xid": large_dmesg}


def large_throughput(kind: str, text: str) -> dict:
    size = len(text.encode())
    samples, status = [], ""
    for _ in range(LARGE_REPEATS):
        seconds, status = _judge_timed(kind, text)
        samples.append(seconds)
    if status == "error":
        raise CannotMeasure(f"{kind}: the generated {size / 1e6:.0f} MB log was judged unreadable, not measured")
    best = min(samples)
    return {
        "bytes": size,
        "lines": text.count("\n"),
        "status": status,
        "seconds": rounded(samples),
        "seconds_summary": summary(samples),
        "mb_per_s_best": round(size / 1e6 / best, 2),
        "mb_per_s_median": round(size / 1e6 / summary(samples)["p50"], 2),
    }


def cli_parse_seconds(kind: str, text: str) -> dict:
    """`fleetctl check parse KIND FILE -o json` on the large log: what an operator waits for,
    process start and file read included."""
    with tempfile.NamedTemporaryFile("w", suffix=".log") as log:
        log.write(text)
        log.flush()
        started = time.perf_counter()
        done = subprocess.run(
            [
                sys.executable,
                "-m",
                "fleetctl.cli.main",
                "check",
                "parse",
                kind,
                log.name,
                "--profile",
                PROFILE,
                "-o",
                "json",
            ],
            capture_output=True,
            text=True,
        )
        seconds = time.perf_counter() - started
    if done.returncode not in (0, 3):  # pass/warn or fail: judged
        raise CannotMeasure(f"fleetctl check parse {kind} exited {done.returncode}: {done.stderr.strip()[:200]}")
    return {"seconds": round(seconds, 3), "exit": done.returncode}


def run(full: bool) -> dict:
    sizes = LARGE_MB if full else LARGE_MB_QUICK
    small = {kind: [small_throughput(kind, f) for f in files] for kind, files in SMALL_CASES.items()}
    figures = {kind: {"fixture_mb_per_s": min(c["mb_per_s"] for c in small[kind])} for kind in small}
    large = {}
    for kind, megabytes in sizes.items():
        text = LARGE_BUILDERS[kind](megabytes, random.Random(8))
        large[kind] = large_throughput(kind, text)
        figures[kind].update(
            large_mb=round(large[kind]["bytes"] / 1e6, 1),
            large_mb_per_s=large[kind]["mb_per_s_median"],
            large_seconds=large[kind]["seconds_summary"]["p50"],
        )
        if kind == "xid":
            large[kind]["cli"] = cli_parse_seconds(kind, text)
            figures[kind]["large_cli_seconds"] = large[kind]["cli"]["seconds"]
    return {"figures": figures, "fixtures": small, "large": large, "profile": PROFILE}
