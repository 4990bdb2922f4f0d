"""`fleetctl worker` as a fleet's process: refuses the implicit per-user database when Temporal
is elsewhere, says at start which database and Temporal it uses (secrets masked), and stops
cleanly on SIGTERM."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from fleetctl.cli.worker import implicit_database_problem
from fleetctl.config import load_settings
from fleetctl.connections.temporal_client import resolve
from tests.packaging.test_wheel import pollers_within

FLEETCTL = str(Path(sys.executable).parent / "fleetctl")


def env_for(tmp_path: Path, **extra: str) -> dict[str, str]:
    (tmp_path / "temporal.toml").write_text("")
    return {
        "PATH": os.environ["PATH"],
        "HOME": str(tmp_path / "home"),
        "TEMPORAL_CONFIG_FILE": str(tmp_path / "temporal.toml"),
        **extra,
    }


@pytest.mark.parametrize(
    "env, refused",
    [
        ({"TEMPORAL_ADDRESS": "temporal.example:7233"}, True),
        ({"TEMPORAL_ADDRESS": "10.0.0.5:7233"}, True),
        ({"TEMPORAL_ADDRESS": "temporal.example:7233", "FLEETCTL_DB_URL": "postgresql://f:pw@db/fleet"}, False),
        ({"TEMPORAL_ADDRESS": "127.0.0.1:7233"}, False),
        ({}, False),  # the local dev server
    ],
)
def test_implicit_database_with_a_remote_temporal_is_refused(env, refused, tmp_path):
    env = env_for(tmp_path, **env)
    settings = load_settings(env=env, config_file=os.devnull)
    problem = implicit_database_problem(settings, resolve(settings, env=env))
    assert bool(problem) is refused
    if refused:
        assert "FLEETCTL_DB_URL" in problem


def test_the_refusal_is_one_line_and_creates_no_database(tmp_path):
    result = subprocess.run(
        [FLEETCTL, "worker"],
        env=env_for(tmp_path, TEMPORAL_ADDRESS="temporal.example:7233"),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 2 and len(result.stderr.strip().splitlines()) == 1, result.stderr
    assert "set FLEETCTL_DB_URL" in result.stderr
    assert not (tmp_path / "home").exists()  # the per-user SQLite file was never made


@pytest.mark.temporal
def test_the_worker_names_its_database_and_temporal_masked_and_stops_on_sigterm(tmp_path, temporal_address):
    db = f"sqlite:///{tmp_path / 'fleet.db'}"
    env = env_for(
        tmp_path,
        TEMPORAL_ADDRESS=temporal_address,
        FLEETCTL_DB_URL=db,
        FLEETCTL_TASK_QUEUE=f"start-{uuid.uuid4().hex[:8]}",
    )
    worker = subprocess.Popen(
        [FLEETCTL, "worker"], env=env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True
    )
    try:
        assert (
            worker.stdout.readline().strip().endswith(f"database {db}, Temporal {temporal_address} namespace default")
        )
        assert worker.stdout.readline().strip() == "database ready"
        # Stopped while serving (Temporal sees it poll), not while starting.
        assert asyncio.run(pollers_within(temporal_address, env["FLEETCTL_TASK_QUEUE"], worker)) > 0
        worker.send_signal(signal.SIGTERM)
        # Bounded by the SDK's shutdown: it stops polling and returns at once with no activity running.
        assert worker.wait(60) == 0
        assert worker.stdout.read().strip().endswith("worker stopped")
    finally:
        if worker.poll() is None:
            worker.kill()


def test_the_start_line_masks_the_database_password_and_the_api_key(tmp_path):
    env = env_for(
        tmp_path,
        TEMPORAL_ADDRESS="127.0.0.1:1",
        TEMPORAL_API_KEY="temporal-secret",
        FLEETCTL_DB_URL="postgresql://fleetctl:db-secret@127.0.0.1:1/fleet",
    )
    result = subprocess.run([FLEETCTL, "worker"], env=env, capture_output=True, text=True, timeout=60)
    assert result.returncode != 0  # nothing listens on port 1
    assert "database postgresql://fleetctl:***@127.0.0.1:1/fleet" in result.stdout, result.stdout
    assert "API key (set)" in result.stdout
    assert "db-secret" not in result.stdout + result.stderr and "temporal-secret" not in result.stdout + result.stderr
