"""CLI start-up: wall time of `fleetctl --help` and `fleetctl node list` on a small fleet,
median of repeated runs, next to `temporal --help` (a Go binary: the floor an operator
compares with), a bare `import typer, rich` (the floor of any Typer CLI in this interpreter:
`--help` should stay within 2x of it, as each noun's module is loaded only when it runs) and
a bare `python -c pass` (the interpreter's own floor). Also which heavy modules each command
loads: `--help` should load none but rich."""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench.harness import CannotMeasure, rounded, summary

SMALL_FLEET = 20
RUNS = 15
RUNS_QUICK = 9
BARE_TYPER = "python -c 'import typer, rich'"
HEAVY_MODULES = (
    "temporalio",
    "kubernetes",
    "sqlalchemy",
    "sqlmodel",
    "alembic",
    "paramiko",
    "psycopg",
    "jinja2",
    "rich",
    "yaml",
    "prometheus_client",
    "pydantic",
)
# Runs the real command and reports which heavy modules it had imported. It calls the Typer
# app, not the entry point: run() leaves with os._exit, past any atexit hook.
_PROBE = """
import json, sys
heavy = {heavy!r}
sys.argv = ["fleetctl", *{args!r}]
from fleetctl.cli.main import app
code = 0
try:
    app()
except SystemExit as done:
    code = done.code
sys.stderr.write("\\nLOADED " + json.dumps([m for m in heavy if m in sys.modules]) + "\\n")
sys.exit(code)
"""


def _fleetctl() -> str:
    beside = Path(sys.executable).parent / "fleetctl"
    if not beside.exists():
        raise CannotMeasure(f"{beside} not found: install the project (pip install -e .)")
    return str(beside)


def _child_cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def _timed_runs(argv: list[str], runs: int, env: dict) -> tuple[list[float], list[float]]:
    """Wall seconds and CPU seconds (user + system) of each run. On a shared machine the CPU
    time is the steadier figure: it does not count the time spent waiting for a core."""
    subprocess.run(argv, capture_output=True, env=env)  # warm the page cache; not counted
    wall, cpu = [], []
    for _ in range(runs):
        cpu_before, started = _child_cpu_s(), time.perf_counter()
        done = subprocess.run(argv, capture_output=True, env=env)
        wall.append(time.perf_counter() - started)
        cpu.append(_child_cpu_s() - cpu_before)
        if done.returncode != 0:
            raise CannotMeasure(f"{' '.join(argv)} exited {done.returncode}: {done.stderr.decode()[-300:]}")
    return wall, cpu


def _loaded_modules(args: list[str], env: dict) -> list[str]:
    done = subprocess.run(
        [sys.executable, "-c", _PROBE.format(heavy=HEAVY_MODULES, args=args)], capture_output=True, text=True, env=env
    )
    line = next((ln for ln in done.stderr.splitlines() if ln.startswith("LOADED ")), None)
    if done.returncode != 0 or line is None:
        raise CannotMeasure(f"fleetctl {' '.join(args)} under the import probe failed: {done.stderr[-300:]}")
    return json.loads(line.removeprefix("LOADED "))


def _small_fleet_db(directory: Path) -> str:
    import yaml

    from fleetctl.db import queries
    from fleetctl.db.engine import get_engine
    from fleetctl.inventory.parse import parse_inventory
    from fleetctl.sim.inventory import render_inventory

    url = f"sqlite:///{directory / 'fleet.db'}"
    specs = parse_inventory(yaml.safe_dump({"nodes": render_inventory(SMALL_FLEET, 2, "h100-sxm", seed=1)}))
    queries.upsert_nodes(get_engine(url), specs)
    return url


def run(full: bool) -> dict:
    from fleetctl.connections.temporal_server import TemporalBinaryMissing, temporal_binary

    try:
        temporal = str(temporal_binary())
    except TemporalBinaryMissing as exc:
        raise CannotMeasure(str(exc)) from None
    runs = RUNS if full else RUNS_QUICK
    fleetctl = _fleetctl()
    with tempfile.TemporaryDirectory(prefix="bench-cli-") as tmp:
        env = {**os.environ, "FLEETCTL_CONFIG": os.devnull, "FLEETCTL_DB_URL": _small_fleet_db(Path(tmp))}
        # name: (argv, arguments for the import probe or None, environment)
        commands = {
            "fleetctl --help": ([fleetctl, "--help"], ["--help"], env),
            f"fleetctl node list ({SMALL_FLEET} nodes)": ([fleetctl, "node", "list"], ["node", "list"], env),
            "temporal --help": ([temporal, "--help"], None, env),
            BARE_TYPER: ([sys.executable, "-c", "import typer, rich"], None, env),
            "python -c pass": ([sys.executable, "-c", "pass"], None, env),
        }
        measured = {}
        for name, (argv, probe_args, run_env) in commands.items():
            samples, cpu = _timed_runs(argv, runs, run_env)
            measured[name] = {
                "argv": argv[1:],
                "seconds": rounded(samples),
                "seconds_summary": summary(samples),
                "cpu_seconds": rounded(cpu),
                "cpu_seconds_summary": summary(cpu),
            }
            if probe_args is not None:
                measured[name]["heavy_modules_loaded"] = _loaded_modules(probe_args, run_env)
    median = {name: m["seconds_summary"]["p50"] for name, m in measured.items()}
    median_cpu = {name: m["cpu_seconds_summary"]["p50"] for name, m in measured.items()}
    figures = {
        name: {"median_s": round(seconds, 3), "median_cpu_s": round(median_cpu[name], 3)}
        for name, seconds in median.items()
    }
    for name in ("fleetctl --help", f"fleetctl node list ({SMALL_FLEET} nodes)"):
        figures[name]["vs_temporal_help"] = round(median[name] / median["temporal --help"], 2)
        figures[name]["vs_bare_typer_rich"] = round(median[name] / median[BARE_TYPER], 2)
        figures[name]["vs_bare_typer_rich_cpu"] = round(median_cpu[name] / median_cpu[BARE_TYPER], 2)
        figures[name]["heavy_modules_loaded"] = measured[name]["heavy_modules_loaded"]
    return {"figures": figures, "runs": runs, "commands": measured, "heavy_modules_watched": list(HEAVY_MODULES)}
