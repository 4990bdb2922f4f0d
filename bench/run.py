"""Run the benchmarks: `python -m bench.run [--full] [--only NAME]`.

Each benchmark writes bench/results/NAME.json (its figures, samples, sizes, the machine,
the date and the load) and prints its figures. Exit status 1 only when a benchmark could
not measure; a slow figure is still a result.
"""

from __future__ import annotations

import argparse
import importlib
import json
import sys
import time
import traceback

from bench.harness import CannotMeasure, load, machine, now_iso, write_result

# Cheapest first, so a broken expensive one still leaves the others' results.
BENCHMARKS = (
    "decode",
    "parsers",
    "cli_startup",
    "agent",
    "preemption",
    "throughput",
    "scaleout",
    "scale",
    "sweep_db",
    "worker_recovery",
    "reaction",
    "spares",
    "retention",
)


def run_one(name: str, full: bool, host: dict) -> bool:
    module = importlib.import_module(f"bench.{name}")
    print(f"== {name}: {module.__doc__.strip().splitlines()[0]}", flush=True)
    started_at, load_before, started = now_iso(), load(), time.monotonic()
    try:
        measured = module.run(full)
    except CannotMeasure as exc:
        print(f"   could not measure: {exc}", flush=True)
        return False
    except Exception:  # noqa: BLE001 - any breakage is "could not measure", with its traceback
        traceback.print_exc()
        print(f"   could not measure: {name} broke (traceback above)", flush=True)
        return False
    result = {
        "benchmark": name,
        "date": started_at,
        "full": full,
        "wall_s": round(time.monotonic() - started, 1),
        "load_before": load_before,
        "load_after": load(),
        "machine": host,
        **measured,
    }
    path = write_result(name, result)
    print(json.dumps(measured["figures"], indent=1, default=str))
    print(f"   {result['wall_s']} s, load {load_before} -> {result['load_after']}; wrote {path}", flush=True)
    return True


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.run", description=__doc__.strip().splitlines()[0])
    parser.add_argument("--full", action="store_true", help="full sizes (10,000 nodes for scale): long")
    parser.add_argument("--only", choices=BENCHMARKS, action="append", help="run only this one (repeatable)")
    args = parser.parse_args(argv)
    host = machine()
    print(f"machine: {host}", flush=True)
    failed = [name for name in (args.only or BENCHMARKS) if not run_one(name, args.full, host)]
    if failed:
        print(f"could not measure: {', '.join(failed)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
