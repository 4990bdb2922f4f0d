"""`fleetctl engines gateway-config` and `grant-roles` on bad input: one line, exit 2,
nothing written or granted."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from fleetctl.authz.gateway import render_maps
from fleetctl.authz.roles import Role
from tests.support.roles import as_roles_file

FLEETCTL = str(Path(sys.executable).parent / "fleetctl")


def fleetctl(tmp_path: Path, *args: str) -> subprocess.CompletedProcess:
    env = {
        "PATH": os.environ["PATH"],
        "HOME": str(tmp_path),
        "FLEETCTL_CONFIG": os.devnull,
        "FLEETCTL_DB_URL": f"sqlite:///{tmp_path / 'fleet.db'}",
    }
    return subprocess.run([FLEETCTL, *args], env=env, capture_output=True, text=True, timeout=60)


def test_gateway_config_prints_the_maps_of_the_mapping(tmp_path) -> None:
    roles = tmp_path / "roles.yaml"
    roles.write_text(as_roles_file("alice: viewer\nolga: operator\n"))
    done = fleetctl(tmp_path, "engines", "gateway-config", "--roles", str(roles), "--service", "fleet-worker")
    assert done.returncode == 0, done.stderr
    assert done.stdout == render_maps({"alice": Role.VIEWER, "olga": Role.OPERATOR}, ["fleet-worker"])


@pytest.mark.parametrize(
    ("command", "roles", "message"),
    [
        (["gateway-config"], "alice: root\n", "'root' is not a role"),
        (["gateway-config"], "- alice\n", "expected a mapping of names to roles"),
        (["gateway-config"], "'al ice': viewer\n", "'al ice' is not a valid name"),
        (["gateway-config"], "alice: [viewer\n", "not valid YAML"),
        (["gateway-config", "--service", "alice"], "alice: viewer\n", "named twice"),
        (["gateway-config", "--subject-dn", "O=Example"], "alice: viewer\n", "must hold {subject} once"),
        (["grant-roles"], "alice: viewer\n", "is not a PostgreSQL database"),
        (["grant-roles"], "fleetctl_admin: admin\n", "is the name of a group role"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(tmp_path, command, roles, message) -> None:
    path = tmp_path / "roles.yaml"
    path.write_text(as_roles_file(roles))
    done = fleetctl(tmp_path, "engines", command[0], "--roles", str(path), *command[1:])
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 2 and len(lines) == 1 and done.stdout == "", done.stderr
    assert message in lines[0], lines[0]
    assert not (tmp_path / "fleet.db").exists()
