"""A simulated fleet on a fresh embedded Temporal dev server and a fresh SQLite fleet
database, with its worker in a process of its own (as `fleetctl worker` runs in
production), so its CPU time and memory can be read apart from the benchmark's."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from bench.harness import CannotMeasure, rss_mib
from fleetctl.config import Settings, load_settings

REPO = Path(__file__).resolve().parents[1]
_CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


@contextmanager
def dev_server(directory: Path, dynamic_config: Mapping[str, str] | None = None) -> Iterator:
    """A fresh dev server on its own SQLite file (directory/temporal.db), with these dynamic
    settings (each value as JSON)."""
    from fleetctl.connections.temporal_server import TemporalBinaryMissing, start_dev_server

    try:
        server = start_dev_server(directory / "temporal.db", dynamic_config=dynamic_config)
    except (TemporalBinaryMissing, RuntimeError) as exc:
        raise CannotMeasure(f"no Temporal dev server: {exc}") from None
    try:
        yield server
    finally:
        server.stop()


def fleet_settings(db_url: str, temporal_address: str) -> Settings:
    unique = uuid.uuid4().hex[:8]
    return load_settings(
        flags={
            "db_url": db_url,
            "temporal_address": temporal_address,
            "task_queue": f"bench-{unique}",
            "fleet": f"bench-{unique}",
            "operator": "bench",
        },
        env={},
        config_file=os.devnull,
    )


def settings_env(settings: Settings) -> dict[str, str]:
    """The environment that makes `fleetctl` (CLI or worker) use these settings."""
    env = {
        **os.environ,
        "FLEETCTL_CONFIG": os.devnull,
        "FLEETCTL_DB_URL": settings.db_url,
        "TEMPORAL_ADDRESS": settings.temporal_address,
        "FLEETCTL_TASK_QUEUE": settings.task_queue,
        "FLEETCTL_FLEET": settings.fleet,
        "FLEETCTL_OPERATOR": settings.operator,
        "FLEETCTL_SIM_TIME_SCALE": str(settings.sim_time_scale),
        "FLEETCTL_REMEDIATION_SHADOW": str(settings.remediation_shadow),
        "FLEETCTL_SPARES_PER_ISLAND": str(settings.spares_per_island),
        "FLEETCTL_WORKER_LANES": settings.worker_lanes,
        "FLEETCTL_BULK_ACTIVITIES_PER_S": str(settings.bulk_activities_per_s),
        "FLEETCTL_WORKER_BULK_NICE": str(settings.worker_bulk_nice),
        "FLEETCTL_WORKER_GC_YOUNG": str(settings.worker_gc_young),
    }
    if settings.slurm_conf:
        env["SLURM_CONF"] = settings.slurm_conf
    for key, var in (("suites_dir", "FLEETCTL_SUITES_DIR"), ("runbooks_dir", "FLEETCTL_RUNBOOKS_DIR")):
        if getattr(settings, key):
            env[var] = getattr(settings, key)
    return env


def seed_fleet(
    settings: Settings, count: int, racks: int, profile: str = "h100-sxm", name_prefix: str = "gpu"
) -> list[str]:
    """`count` simulated nodes in the fleet database, state new; their names. Runs that share
    a Temporal server need prefixes of their own: node workflow ids are the node names."""
    import yaml

    from fleetctl.db import queries
    from fleetctl.db.engine import get_engine
    from fleetctl.inventory.parse import parse_inventory
    from fleetctl.sim.inventory import render_inventory

    specs = parse_inventory(
        yaml.safe_dump({"nodes": render_inventory(count, racks, profile, seed=1, name_prefix=name_prefix)})
    )
    queries.upsert_nodes(get_engine(settings.db_url), specs)
    return [s.name for s in specs]


def cpu_seconds(pid: int, reaped_children: bool = False) -> float | None:
    """User + system CPU time a process has used so far (None when it is gone); with
    `reaped_children`, also that of its children that have exited and been waited for."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    ticks = int(fields[11]) + int(fields[12])
    if reaped_children:
        ticks += int(fields[13]) + int(fields[14])
    return ticks / _CLOCK_TICKS


@dataclass
class WorkerProcess:
    process: subprocess.Popen

    @classmethod
    def start(cls, argv: list[str], env: dict[str, str], log: Path, ready_text: str | None = None) -> WorkerProcess:
        with open(log, "wb") as out:
            process = subprocess.Popen(
                argv,
                cwd=REPO,
                env={**env, "PYTHONUNBUFFERED": "1"},
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        worker = cls(process)
        deadline = time.monotonic() + 60
        while ready_text and ready_text not in log.read_text(errors="replace"):
            if process.poll() is not None or time.monotonic() > deadline:
                worker.stop()
                raise CannotMeasure(f"worker did not start: {log.read_text(errors='replace')[-500:]}")
            time.sleep(0.1)
        return worker

    @property
    def pid(self) -> int:
        return self.process.pid

    def cpu_seconds(self) -> float | None:
        return cpu_seconds(self.pid)

    def rss_mib(self) -> float | None:
        return rss_mib(self.pid)

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGINT)  # the worker drains and exits on Ctrl-C
            try:
                self.process.wait(20)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()


def fleetctl_worker(settings: Settings, log: Path, env: Mapping[str, str] | None = None) -> WorkerProcess:
    """`env`: more of the worker's environment, over settings_env."""
    return WorkerProcess.start(
        [sys.executable, "-m", "fleetctl.cli.main", "worker"],
        {**settings_env(settings), **(env or {})},
        log,
        ready_text="database ready",
    )
