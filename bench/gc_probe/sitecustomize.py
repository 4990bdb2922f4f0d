"""Imported at start-up (as `sitecustomize`) by a worker the critical-lane benchmark starts with
`--gc-pauses`: each garbage collection of the process, one line each to
$FLEETCTL_BENCH_GC_DIR/<pid>: its generation, when it started (epoch seconds) and how long it
held the interpreter (milliseconds). bench.critical_lane.gc_pauses reads them."""

import gc
import os
import time

_directory = os.environ.get("FLEETCTL_BENCH_GC_DIR")
_started = [0.0, 0.0]


def _recorder(out):
    """A gc callback writing to `out`, opened once: a collection costs no open of its own."""

    def record(phase: str, info: dict) -> None:
        if phase == "start":
            _started[:] = time.time(), time.perf_counter()
            return
        held_ms = (time.perf_counter() - _started[1]) * 1000
        out.write(f"{info['generation']} {_started[0]:.6f} {held_ms:.3f}\n")

    return record


if _directory:
    gc.callbacks.append(_recorder(open(os.path.join(_directory, str(os.getpid())), "a", buffering=1)))
