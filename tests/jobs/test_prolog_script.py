"""fleetctl/prolog/slurm-prolog.sh on its own, with a stand-in for fleetctl that records its
argv and exits as told: which exits fail the job, and that every value reaches fleetctl as
one argument, whatever it holds."""

from __future__ import annotations

import os
import shutil
import subprocess
from importlib import resources
from pathlib import Path

import pytest

PROLOG = Path(str(resources.files("fleetctl") / "prolog" / "slurm-prolog.sh"))


def run_prolog(tmp_path: Path, exit_status: int, **env: str) -> tuple[int, list[str], str]:
    argv_file = tmp_path / "argv"
    fake = tmp_path / "fleetctl"
    fake.write_text(f'#!/bin/sh\nfor a in "$@"; do printf "%s\\0" "$a"; done > "{argv_file}"\nexit {exit_status}\n')
    fake.chmod(0o755)
    # timeout(1) itself, first on PATH through a wrapper that notes the limit it was given.
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    (bin_dir / "timeout").write_text(
        f'#!/bin/sh\nprintf "%s" "$1" > "{tmp_path / "limit"}"\nexec {shutil.which("timeout")} "$@"\n'
    )
    (bin_dir / "timeout").chmod(0o755)
    done = subprocess.run(
        ["/bin/sh", str(PROLOG)],
        env={"PATH": f"{bin_dir}:{os.environ['PATH']}", "FLEETCTL": str(fake), **env},
        capture_output=True,
        text=True,
        timeout=30,
    )
    argv = argv_file.read_text().split("\0")[:-1] if argv_file.exists() else []
    return done.returncode, argv, done.stderr


@pytest.mark.parametrize(
    "fleetctl_exit, prolog_exit",
    [
        (0, 0),  # passed, or the capacity guard kept the node
        (3, 1),  # a check failed and the node was drained: Slurm requeues the job
        (4, 0),  # a check could not be judged: the job starts
        (1, 0),  # fleetctl could not ask: its outage must not drain the cluster
        (2, 0),  # a usage error (a bad setting) is not the node's fault
    ],
)
def test_only_a_failed_check_fails_the_job(tmp_path, fleetctl_exit, prolog_exit) -> None:
    status, argv, _ = run_prolog(tmp_path, fleetctl_exit, SLURMD_NODENAME="node1", SLURM_JOB_ID="42")
    assert status == prolog_exit
    assert argv == ["--as", "prolog@node1", "node", "prolog", "node1", "--job", "42", "--suite", "prejob"]


def test_every_value_reaches_fleetctl_as_one_argument(tmp_path) -> None:
    hostile = "n1; touch pwned $(id) `id` \"'"
    status, argv, _ = run_prolog(
        tmp_path, 0, SLURMD_NODENAME=hostile, SLURM_JOB_ID="1 2", FLEETCTL_PROLOG_SUITE="quick --x"
    )
    assert status == 0
    assert argv == ["--as", f"prolog@{hostile}", "node", "prolog", hostile, "--job", "1 2", "--suite", "quick --x"]
    assert not (tmp_path / "pwned").exists() and not Path("pwned").exists()


def test_without_a_node_name_it_checks_nothing_and_lets_the_job_start(tmp_path) -> None:
    status, argv, stderr = run_prolog(tmp_path, 3)
    assert (status, argv) == (0, []) and "SLURMD_NODENAME is not set" in stderr


def test_a_bad_timeout_setting_falls_back_to_the_default(tmp_path) -> None:
    status, argv, stderr = run_prolog(tmp_path, 3, SLURMD_NODENAME="node1", FLEETCTL_PROLOG_TIMEOUT_S="1; reboot")
    assert status == 1 and argv[4] == "node1" and "whole seconds" in stderr


@pytest.mark.parametrize("limit", ["0", "000", "3601", "99999999999999999999999"])
def test_a_timeout_of_zero_or_past_the_bound_is_refused_not_unlimited(tmp_path, limit) -> None:
    """`timeout 0` runs the checks with no limit at all: a hung check would hold the job's
    start for ever."""
    status, _argv, stderr = run_prolog(tmp_path, 3, SLURMD_NODENAME="node1", FLEETCTL_PROLOG_TIMEOUT_S=limit)
    assert status == 1 and "from 1 to 3600" in stderr
    assert (tmp_path / "limit").read_text() == "120"


@pytest.mark.parametrize("limit", ["1", "3600", "0090"])
def test_a_timeout_within_the_bound_is_used(tmp_path, limit) -> None:
    run_prolog(tmp_path, 0, SLURMD_NODENAME="node1", FLEETCTL_PROLOG_TIMEOUT_S=limit)
    assert (tmp_path / "limit").read_text() == limit


@pytest.mark.parametrize(
    "context, gate, suite",
    [
        ("prolog_slurmd", "prolog", "prejob"),
        ("epilog_slurmd", "epilog", "after-suite"),
        ("", "prolog", "prejob"),  # a Slurm before SLURM_SCRIPT_CONTEXT: the prolog it always was
    ],
)
def test_slurmds_script_context_picks_prolog_or_epilog(tmp_path, context, gate, suite) -> None:
    """One script for both: slurmd says which it runs as; an epilog's failed check exits 1 too
    (Slurm drains a node whose epilog fails)."""
    status, argv, _ = run_prolog(
        tmp_path,
        3,
        SLURMD_NODENAME="node1",
        SLURM_JOB_ID="42",
        SLURM_SCRIPT_CONTEXT=context,
        FLEETCTL_EPILOG_SUITE="after-suite",
    )
    assert status == 1
    assert argv == ["--as", f"{gate}@node1", "node", gate, "node1", "--job", "42", "--suite", suite]
