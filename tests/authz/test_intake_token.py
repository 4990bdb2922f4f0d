"""The intake's operator token is a subject of the roles file like any other: the intake takes
it only while that subject is an operator of its fleet, asked at each request, so a revoked
role shuts the token out without a restart."""

from __future__ import annotations

import os
import subprocess
import sys

from fleetctl.authz.roles import Role, RolesWatch
from fleetctl.intake.credentials import Credentials
from fleetctl.intake.delivery import Intake
from fleetctl.intake.server import serve_http
from tests.intake.test_server import TOKEN, Recorder, post

ALERT = {"events": [{"node": "gpu-a", "code": 79, "message": "GPU has fallen off the bus", "id": "e1"}]}


def test_the_token_is_taken_while_its_subject_is_an_operator_and_refused_once_revoked(tmp_path) -> None:
    roles = tmp_path / "roles.yaml"
    roles.write_text("subjects: {intake: operator}\n")
    watch = RolesWatch(roles)
    intake = Intake(tmp_path / "spool", Recorder())
    server = serve_http(
        intake, Credentials(TOKEN, None, lambda: watch.grants("intake", "default", Role.OPERATOR)), "127.0.0.1", 0
    )
    try:
        status, body = post(server.server_port, "/events", ALERT)
        assert status == 202, body
        roles.write_text("subjects: {intake: viewer}\n")  # another size: seen as changed whatever the clock
        status, body = post(server.server_port, "/events", ALERT)
        assert status == 401, body
        roles.write_text("subjects: {intake: [broken\n")  # refused: nothing is granted, not the old grant
        assert post(server.server_port, "/events", ALERT)[0] == 401
    finally:
        server.shutdown()
        intake.close()


def test_events_serve_refuses_to_start_when_the_token_subject_is_no_operator(tmp_path) -> None:
    (tmp_path / "roles.yaml").write_text("subjects: {intake: viewer, alertmanager: operator}\n")
    done = subprocess.run(
        [
            *(sys.executable, "-m", "fleetctl.cli.main", "--temporal-address", "127.0.0.1:1", "events", "serve"),
            *("--spool", str(tmp_path / "spool"), "--roles", str(tmp_path / "roles.yaml")),
        ],
        env={**os.environ, "FLEETCTL_CONFIG": os.devnull, "FLEETCTL_INTAKE_TOKEN": TOKEN},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 2
    assert done.stderr == (
        f"error: --token-subject intake is not an operator of fleet default in {tmp_path / 'roles.yaml'}: events need one\n"
    )
