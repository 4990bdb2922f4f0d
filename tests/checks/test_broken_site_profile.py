"""A broken site profile (bad YAML, a threshold out of bounds, a name that shadows a packaged
profile) stops every command that loads the profiles directory with one line naming the file
and the problem, a non-zero exit and nothing written: `check profiles`, `check parse`, `agent`,
`node import` and the worker's start. Never a traceback, never "internal error"."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from fleetctl.cli.main import app
from tests.support.fixtures import FIXTURES

SITE = FIXTURES / "site_profiles"
ROCE = "h100-roce-1x400"
CLI = [sys.executable, "-m", "fleetctl.cli.main"]
# A worker's start reads the profiles before it asks Temporal anything; one that got past them
# fails on the unreachable address within the client's connect timeout.
WORKER_START_S = 60
runner = CliRunner()


def _bad_yaml(site: Path) -> tuple[Path, str]:
    path = site / f"{ROCE}.yaml"
    path.write_text(f"name: {ROCE}\ngpu_count: [8\n")
    return path, "not valid YAML"


def _out_of_bounds(site: Path) -> tuple[Path, str]:
    path = site / f"{ROCE}.yaml"
    path.write_text(path.read_text().replace("roce_rate_gbps: 400", "roce_rate_gbps: 400000", 1))
    return path, "roce_rate_gbps: 400000 is outside 0..1600 Gb/s"


def _shadows_a_packaged_one(site: Path) -> tuple[Path, str]:
    path = site / "h100-sxm.yaml"
    path.write_text((site / f"{ROCE}.yaml").read_text().replace(f"name: {ROCE}", "name: h100-sxm"))
    return path, "has the name of a packaged profile"


BREAKAGES = [_bad_yaml, _out_of_bounds, _shadows_a_packaged_one]


@pytest.fixture(params=BREAKAGES, ids=lambda f: f.__name__.strip("_"))
def broken(request, tmp_path) -> tuple[Path, Path, str]:
    """(the site directory, its broken file, what the refusal must say)."""
    site = tmp_path / "profiles"
    shutil.copytree(SITE, site)
    return site, *request.param(site)


def _refused_in_one_line(result_code: int, stderr: str, path: Path, words: str) -> None:
    assert result_code == 2, stderr
    assert stderr.count("\n") == 1 and str(path) in stderr and words in stderr, stderr
    assert "internal" not in stderr and "Traceback" not in stderr


def _inventory(tmp_path: Path, profile: str) -> Path:
    inventory = tmp_path / "inventory.yaml"
    inventory.write_text(f"nodes: [{{name: n1, address: 'sim://n1', profile: {profile}}}]\n")
    return inventory


def test_check_profiles_names_the_broken_file(broken) -> None:
    site, path, words = broken
    result = runner.invoke(
        app, ["check", "profiles"], env={"FLEETCTL_CONFIG": os.devnull, "FLEETCTL_PROFILES_DIR": str(site)}
    )
    _refused_in_one_line(result.exit_code, result.stderr, path, words)
    assert result.stdout == ""


def test_check_parse_against_the_broken_profile_names_its_file(broken) -> None:
    """Judged by the broken profile: refused before the output is read (stdin never asked)."""
    site, path, words = broken
    profile = path.name.removesuffix(".yaml")
    result = runner.invoke(
        app,
        ["check", "parse", "ib", str(FIXTURES / "ib/ibstat_roce_400g_ok.txt"), "--profile", profile],
        env={"FLEETCTL_CONFIG": os.devnull, "FLEETCTL_PROFILES_DIR": str(site)},
    )
    _refused_in_one_line(result.exit_code, result.stderr, path, words)


@pytest.mark.parametrize("profile", ["h100-sxm", ROCE])
def test_node_import_names_the_broken_file_and_imports_nothing(broken, tmp_path, profile) -> None:
    """Whatever profile the inventory names (a packaged one too): the worker will judge by the
    directory whole, so the import refuses it whole, before the database is opened."""
    site, path, words = broken
    database = tmp_path / "fleet.db"
    for extra in (["--dry-run"], []):
        result = runner.invoke(
            app,
            [
                "--db-url",
                f"sqlite:///{database}",
                "--temporal-address",
                "127.0.0.1:1",
                "node",
                "import",
                str(_inventory(tmp_path, profile)),
                *extra,
            ],
            env={"FLEETCTL_CONFIG": os.devnull, "FLEETCTL_PROFILES_DIR": str(site)},
        )
        _refused_in_one_line(result.exit_code, result.stderr, path, words)
        assert not database.exists()


def _start_worker(site: Path, tmp_path: Path) -> subprocess.CompletedProcess:
    env = {
        **os.environ,
        "FLEETCTL_CONFIG": os.devnull,
        "FLEETCTL_PROFILES_DIR": str(site),
        "FLEETCTL_DB_URL": f"sqlite:///{tmp_path / 'fleet.db'}",
        "TEMPORAL_ADDRESS": "127.0.0.1:1",
    }
    return subprocess.run([*CLI, "worker"], env=env, capture_output=True, text=True, timeout=WORKER_START_S)


def test_the_worker_does_not_start_on_a_broken_site_profile(broken, tmp_path) -> None:
    site, path, words = broken
    done = _start_worker(site, tmp_path)
    _refused_in_one_line(done.returncode, done.stderr, path, words)
    assert "profiles_dir" in done.stderr and done.stdout == ""
    assert not (tmp_path / "fleet.db").exists()  # refused before the database is opened


def test_the_worker_starts_past_a_sound_site_directory(tmp_path) -> None:
    """The same start with the test's sound profiles gets as far as Temporal (unreachable here):
    the refusal above is the broken file's, not any site directory's."""
    done = _start_worker(SITE, tmp_path)
    assert done.returncode != 0 and "profiles_dir" not in done.stderr and "127.0.0.1:1" in done.stderr, done.stderr


def test_the_agent_judging_by_the_broken_profile_does_not_start(broken, tmp_path) -> None:
    """`fleetctl agent --profile P` loads P to judge its samples: refused before it reads a log
    or opens its spool."""
    site, path, words = broken
    spool = tmp_path / "spool"
    result = runner.invoke(
        app,
        [
            "agent",
            "--profile",
            path.name.removesuffix(".yaml"),
            "--file",
            os.devnull,
            "--spool",
            str(spool),
            "--metrics-port",
            "0",
        ],
        env={"FLEETCTL_CONFIG": os.devnull, "FLEETCTL_PROFILES_DIR": str(site)},
    )
    _refused_in_one_line(result.exit_code, result.stderr, path, words)
    assert not spool.exists()
