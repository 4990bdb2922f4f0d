"""The wheel as an operator gets it: built with `python -m build`, installed into a clean
venv WITHOUT the test extras, run from outside the checkout. Catches an undeclared runtime
import (as click once was) and data the wheel lacks (migrations, runbooks, suites, profiles,
templates). One build and one venv per session; each test runs the installed `fleetctl`."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from fleetctl.db.engine import head_revision

REPO = Path(__file__).resolve().parents[2]
FIXTURES = REPO / "tests" / "fixtures"
# Bounds of the build, the venv and the install (a loaded 2-core machine takes minutes).
BUILD_S, VENV_S, INSTALL_S = 600, 300, 900
# A command of the installed fleetctl.
RUN_S = 120
# One process of `make test`'s two runs them all, so the wheel is built and installed once,
# in the first test's setup: its bound is the fixture's steps' bounds and its own run.
pytestmark = [
    pytest.mark.packaging,
    pytest.mark.xdist_group("packaging"),
    pytest.mark.timeout(BUILD_S + VENV_S + INSTALL_S + 2 * RUN_S),
]
# A worker that reached Temporal polls its task queue within a poll interval; this bounds
# its start (imports, migration, connect) on a loaded machine.
WORKER_POLLS_WITHIN_S = 60


@pytest.fixture(scope="session")
def installed(tmp_path_factory) -> Path:
    """The bin directory of a fresh venv with only the built wheel (and its dependencies)."""
    work = tmp_path_factory.mktemp("wheel")
    # sdist first, then the wheel from the sdist (build's default): the sdist must carry
    # everything the wheel needs, as it will for anyone building from PyPI's sdist.
    subprocess.run(
        [sys.executable, "-m", "build", "--outdir", str(work / "dist"), str(REPO)],
        check=True,
        capture_output=True,
        timeout=BUILD_S,
    )
    wheel = next((work / "dist").glob("fleetctl-*.whl"))
    subprocess.run([sys.executable, "-m", "venv", str(work / "venv")], check=True, timeout=VENV_S)
    # Without compiling every dependency's modules up front (most of the install's CPU time):
    # what the tests import is compiled as it is first imported, as in any venv.
    subprocess.run(
        [str(work / "venv/bin/pip"), "install", "-q", "--no-compile", str(wheel)],
        check=True,
        capture_output=True,
        timeout=INSTALL_S,
    )
    return work / "venv/bin"


def run(installed: Path, cwd: Path, *args: str, env: dict[str, str] | None = None, timeout: float = RUN_S):
    # From an empty directory, with none of the checkout on the path: only the wheel answers.
    base = {"PATH": f"{installed}:/usr/bin:/bin", "HOME": str(cwd / "home"), "TEMPORAL_CONFIG_FILE": os.devnull}
    return subprocess.run(
        [str(installed / "fleetctl"), *args],
        cwd=cwd,
        env={**base, **(env or {})},
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def test_the_installed_packages_come_from_the_venv_not_the_checkout(installed, tmp_path):
    out = subprocess.run(
        [
            str(installed / "python"),
            "-c",
            "import fleetctl, fleetctl.workflows, fleetctl.checks, fleetctl.migrations, fleetctl.runbooks as r\n"
            "f = fleetctl\n"
            "print('\\n'.join(m.__file__ for m in (f, f.workflows, f.checks, f.migrations, r)))",
        ],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    assert all(path.startswith(str(installed.parent)) for path in out), out
    pip = subprocess.run([str(installed / "pip"), "list", "--format=freeze"], capture_output=True, text=True).stdout
    assert "pytest==" not in pip and "Flask==" not in pip  # the test extras are not there to hide a missing one


def test_the_wheel_installs_one_top_level_package(installed, tmp_path):
    # The repository's workflows/, checks/, migrations/ and runbooks/ ship inside fleetctl: a
    # generic top-level name in site-packages would collide with any other distribution's.
    listing = (
        "import importlib.metadata as m\n"
        "print('\\n'.join(sorted({f.parts[0] for f in m.files('fleetctl') if f.parts[0] != '..'})))"
    )
    out = subprocess.run(
        [str(installed / "python"), "-c", listing], cwd=tmp_path, capture_output=True, text=True, check=True
    ).stdout.split()
    assert [top for top in out if not top.endswith(".dist-info")] == ["fleetctl"], out


def test_help(installed, tmp_path):
    result = run(installed, tmp_path, "--help")
    assert result.returncode == 0, result.stderr
    assert "worker" in result.stdout and "runbook" in result.stdout


def test_db_upgrade_on_sqlite(installed, tmp_path):
    url = f"sqlite:///{tmp_path / 'fleet.db'}"
    result = run(installed, tmp_path, "--db-url", url, "db", "upgrade")
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip().endswith(f"empty -> {head_revision()}"), result.stdout


@pytest.mark.postgres
def test_db_upgrade_on_postgresql(installed, tmp_path, postgres_server):
    from bench.postgres import fresh_database_url

    result = run(installed, tmp_path, "--db-url", fresh_database_url(postgres_server), "db", "upgrade")
    assert result.returncode == 0, result.stderr
    assert f"empty -> {head_revision()}" in result.stdout and "fleetctl:fleetctl@" not in result.stdout


def test_runbook_list_finds_the_shipped_runbooks(installed, tmp_path):
    result = run(installed, tmp_path, "runbook", "list", "-o", "json")
    assert result.returncode == 0, result.stderr
    import json

    shipped = {path.stem for path in (REPO / "runbooks").glob("*.yaml")}
    assert {book["name"] for book in json.loads(result.stdout)} == shipped


@pytest.mark.parametrize(
    "sample, code, status", [("8xh100_full_sweep_ok.txt", 0, "pass"), ("8xh100_slow_fail.txt", 3, "fail")]
)
def test_check_parse_judges_with_the_shipped_profile(installed, tmp_path, sample, code, status):
    import json

    result = run(
        installed,
        tmp_path,
        "check",
        "parse",
        "nccl",
        str(FIXTURES / "checks" / "nccl" / sample),
        "--profile",
        "h100-sxm",
        "-o",
        "json",
    )
    assert result.returncode == code, result.stderr
    assert json.loads(result.stdout)["status"] == status


@pytest.mark.temporal
def test_worker_starts_and_polls_the_dev_server(installed, tmp_path, temporal_address):
    queue = f"wheel-{uuid.uuid4().hex[:8]}"
    worker = subprocess.Popen(
        [str(installed / "fleetctl"), "worker"],
        cwd=tmp_path,
        env={
            "PATH": f"{installed}:/usr/bin:/bin",
            "HOME": str(tmp_path / "home"),
            "TEMPORAL_CONFIG_FILE": os.devnull,
            "TEMPORAL_ADDRESS": temporal_address,
            "FLEETCTL_TASK_QUEUE": queue,
            "FLEETCTL_FLEET": queue,
            "FLEETCTL_DB_URL": f"sqlite:///{tmp_path / 'fleet.db'}",
        },
        stdout=subprocess.PIPE,
        stderr=open(tmp_path / "worker.log", "w"),
        text=True,
    )
    try:
        started = worker.stdout.readline()
        assert f"Temporal {temporal_address} namespace default" in started, (tmp_path / "worker.log").read_text()[
            -2000:
        ]
        assert asyncio.run(pollers_within(temporal_address, queue, worker)) > 0
    finally:
        worker.terminate()
        worker.wait(30)


async def pollers_within(address: str, queue: str, worker: subprocess.Popen) -> int:
    """Positive evidence the installed worker is up: Temporal sees it polling its queue."""
    from temporalio.api.enums.v1 import TaskQueueType
    from temporalio.api.taskqueue.v1 import TaskQueue
    from temporalio.api.workflowservice.v1 import DescribeTaskQueueRequest
    from temporalio.client import Client

    client = await Client.connect(address)
    request = DescribeTaskQueueRequest(
        namespace="default", task_queue=TaskQueue(name=queue), task_queue_type=TaskQueueType.TASK_QUEUE_TYPE_WORKFLOW
    )
    deadline = time.monotonic() + WORKER_POLLS_WITHIN_S
    while time.monotonic() < deadline and worker.poll() is None:
        pollers = (await client.workflow_service.describe_task_queue(request)).pollers
        if pollers:
            return len(pollers)
        await asyncio.sleep(0.5)
    return 0


def test_the_wheel_carries_the_slurm_prolog_and_it_runs_the_installed_fleetctl(installed, tmp_path):
    """The script docs/jobs.md has sites exec from their wrapper; an unknown node is fleetctl's
    error (exit 1), which lets the job start (exit 0), and fleetctl says why on stderr."""
    site = (
        run(installed, tmp_path, "--help").returncode == 0
        and subprocess.run(
            [
                str(installed / "python"),
                "-c",
                "import fleetctl, pathlib; "
                "print(pathlib.Path(fleetctl.__file__).parent / 'prolog' / 'slurm-prolog.sh')",
            ],
            cwd=tmp_path,
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
    )
    assert site.startswith(str(installed.parent)) and Path(site).is_file()
    env = {"PATH": f"{installed}:/usr/bin:/bin", "HOME": str(tmp_path / "home"), "TEMPORAL_CONFIG_FILE": os.devnull}
    db = f"sqlite:///{tmp_path / 'fleet.db'}"
    # The fleet's database exists where a prolog runs (a read never creates one).
    subprocess.run([str(installed / "fleetctl"), "--db-url", db, "db", "upgrade"], env=env, check=True, timeout=120)
    result = subprocess.run(
        ["/bin/sh", site],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
        env={
            "PATH": f"{installed}:/usr/bin:/bin",
            "HOME": str(tmp_path / "home"),
            "TEMPORAL_CONFIG_FILE": os.devnull,
            "FLEETCTL_DB_URL": f"sqlite:///{tmp_path / 'fleet.db'}",
            "SLURMD_NODENAME": "node1",
            "SLURM_JOB_ID": "7",
        },
    )
    assert result.returncode == 0 and "error: unknown node: node1" in result.stderr, result.stderr


def test_the_front_door_starts_from_the_wheel(installed, tmp_path):
    """Its server, certificate and token libraries are the wheel's dependencies, not the test
    extras': `api serve` imports them all before it binds its socket."""
    run_dir = tmp_path / "run"
    run_dir.mkdir(mode=0o700)
    (tmp_path / "roles.yaml").write_text("subjects: {alice: operator}\n")
    argv = ["--db-url", f"sqlite:///{tmp_path / 'fleet.db'}", "api", "serve", "--socket", str(run_dir / "api.sock")]
    argv += ["--roles", str(tmp_path / "roles.yaml"), "--oidc-issuer", "https://idp.test"]
    argv += ["--oidc-jwks-url", "http://127.0.0.1:1/jwks.json", "--oidc-audience", "fleetctl"]
    base = {"PATH": f"{installed}:/usr/bin:/bin", "HOME": str(tmp_path / "home"), "TEMPORAL_CONFIG_FILE": os.devnull}
    server = subprocess.Popen(
        [str(installed / "fleetctl"), *argv], cwd=tmp_path, env=base, stderr=subprocess.PIPE, text=True
    )
    try:
        deadline = time.monotonic() + RUN_S
        while not (run_dir / "api.sock").is_socket():
            assert server.poll() is None, server.stderr.read() if server.stderr else ""
            assert time.monotonic() < deadline, "api serve did not bind its socket"
            time.sleep(0.1)
    finally:
        server.terminate()
        server.wait(RUN_S)
