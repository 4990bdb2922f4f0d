"""Writes through the front door as deployed (nginx + `fleetctl api serve`), with real client
certificates and OIDC tokens, real PostgreSQL and the real Temporal dev server: a viewer is
refused every write command, an operator a firmware roll-out, the recorded actor is the
authenticated subject whatever `--as` says, and each is in `fleetctl audit`."""

from __future__ import annotations

import json
import os
import ssl
import urllib.error
import urllib.request

import pytest
from cryptography.hazmat.primitives.asymmetric import rsa

from bench.postgres import fresh_database_url
from fleetctl.authz.api_client import ApiError, run_remote
from fleetctl.authz.commands import COMMANDS, Kind
from fleetctl.config import load_settings
from fleetctl.db.audit import audit_requests
from fleetctl.db.engine import get_engine
from fleetctl.db.firmware import current_baseline, rollouts
from tests.authz.front_door import Issuer, fleetctl, start_front_door
from tests.conftest import FIXTURES
from tests.production.mtls_proxy import Authority

pytestmark = [pytest.mark.temporal, pytest.mark.postgres]

ROLES = """
subjects:
  vera: viewer
  olga: operator
  adam: admin
  fiona: {"*": viewer, gpu-east: admin, gpu-west: operator}
groups:
  sre: operator
"""
BASELINE = FIXTURES / "firmware" / "h100-baseline.yaml"
WRITES = sorted(path for path, rule in COMMANDS.items() if rule.kind is Kind.WRITE)


@pytest.fixture(scope="module")
def door(tmp_path_factory, postgres_server, temporal_address):
    directory = tmp_path_factory.mktemp("front-door")
    ca = Authority(directory, "fleet-client-ca")
    issuer = Issuer()
    db_url = fresh_database_url(postgres_server)
    door = start_front_door(directory / "door", ROLES, db_url, temporal_address, issuer, ca)
    door.issuer = issuer
    door.certs = {name: ca.client(name) for name in ("vera", "olga", "adam", "eve", "fiona")}
    yield door
    door.stop()
    issuer.stop()


def _env(door, tmp_path, who: str, **extra: str) -> dict[str, str]:
    return {**door.client_env(tmp_path / who, cert=door.certs[who]), **extra}


def _settings(door, who: str):
    cert, key = door.certs[who]
    return load_settings(
        flags={"api_url": door.url, "api_ca_path": str(door.ca.cert_path), "api_cert_path": str(cert)}
        | {"api_key_path": str(key), "fleet": door.fleet},
        env={},
        config_file=os.devnull,
    )


def _last(door, **filters) -> dict:
    return audit_requests(get_engine(door.db_url), **filters)[-1]


@pytest.mark.parametrize("path", WRITES)
def test_a_viewer_is_refused_every_write_command(door, path: str) -> None:
    needed = COMMANDS[path].role.value
    argv = [*path.split(), *COMMANDS[path].writes_with[:1], "node-1"]
    with pytest.raises(ApiError) as refused:
        run_remote(_settings(door, "vera"), {"argv": argv, "fleet": None, "as": None, "files": {}})
    assert str(refused.value) == f"denied: {path} needs the {needed} role in fleet {door.fleet} (vera holds viewer)"
    row = _last(door, subject="vera")
    assert (row["command"], row["decision"], row["role_needed"], row["role_held"]) == (path, "denied", needed, "viewer")
    assert row["exit_code"] is None  # never run


def test_an_operator_is_refused_a_firmware_rollout_and_it_is_in_the_audit(door, tmp_path) -> None:
    env = _env(door, tmp_path, "olga")
    done = fleetctl(env, "firmware", "rollout", "--baseline", str(BASELINE), "--no-watch")
    assert done.returncode == 1 and done.stdout == ""
    assert done.stderr == (
        f"error: denied: firmware rollout needs the admin role in fleet {door.fleet} (olga holds operator)\n"
    )
    assert rollouts(get_engine(door.db_url)) == []
    audit = fleetctl(env, "audit", "--subject", "olga", "--denied", "-o", "json")
    assert audit.returncode == 0, audit.stderr
    rows = json.loads(audit.stdout)
    assert rows and rows[-1]["command"] == "firmware rollout" and rows[-1]["role_needed"] == "admin"
    assert rows[-1]["args"] == ["--baseline", str(BASELINE), "--no-watch"]


def test_the_recorded_actor_is_the_subject_whatever_as_says(door, tmp_path) -> None:
    engine = get_engine(door.db_url)
    env = _env(door, tmp_path, "adam")
    for claimed in ("olga", "olga/chg-7", "adamx/chg-7", "lifecycle"):
        done = fleetctl(env, "--as", claimed, "firmware", "baseline", "set", str(BASELINE))
        assert done.returncode == 1, done
        assert done.stderr == f"error: denied: --as {claimed!r}: adam may act only as adam or adam/WHY\n"
    done = fleetctl({**env, "FLEETCTL_OPERATOR": "root"}, "firmware", "baseline", "set", str(BASELINE))
    assert done.returncode == 1 and "--as 'root'" in done.stderr
    for claimed, actor in ((None, "adam"), ("adam/chg-7", "adam/chg-7")):
        args = ["--as", claimed] if claimed else []
        done = fleetctl(env, *args, "firmware", "baseline", "set", str(BASELINE))
        assert done.returncode == 0, done.stderr
        assert done.stdout.startswith("baseline fleet-2026-12 set")
        assert current_baseline(engine).created_by == actor
    audit = json.loads(fleetctl(env, "audit", "--subject", "adam", "-o", "json").stdout)
    assert [(r["actor"], r["decision"], r["exit_code"]) for r in audit[-2:]] == [
        ("adam", "allowed", 0),
        ("adam/chg-7", "allowed", 0),
    ]
    assert sum(r["decision"] == "denied" for r in audit) >= 5


def test_a_drain_through_the_front_door_records_the_subject(door, tmp_path) -> None:
    import asyncio

    from fleetctl.db import queries
    from fleetctl.workflows.client import connect
    from tests.support.sim_fleet import make_fleet
    from tests.support.worker import WorkerThread, start_in_production, terminate_node_workflows

    settings = load_settings(
        flags={
            "db_url": door.db_url,
            "temporal_address": door.temporal_address,
            "task_queue": door.task_queue,
            "fleet": door.fleet,
        },
        env={},
        config_file=os.devnull,
    )
    (node,) = make_fleet(settings, 1, racks=1)
    worker = WorkerThread(settings).start()
    try:

        async def in_production() -> None:
            await start_in_production(await connect(settings), settings, node)

        asyncio.run(in_production())
        env = _env(door, tmp_path, "olga")
        done = fleetctl(env, "--as", "olga/inc-9", "node", "drain", node, "--reason", "fans loud")
        assert done.returncode == 0, done.stdout + done.stderr
        events = queries.node_events(get_engine(door.db_url), node)
        drain = next(e for e in events if e.to_state == "draining")
        assert drain.actor == "olga/inc-9"
        rows = json.loads(fleetctl(env, "audit", "--node", node, "-o", "json").stdout)
        assert [(r["subject"], r["actor"], r["command"], r["nodes"], r["exit_code"]) for r in rows] == [
            ("olga", "olga/inc-9", "node drain", [node], 0)
        ]
    finally:
        worker.stop()
        asyncio.run(terminate_node_workflows(settings, [node]))


def test_whoami_names_the_subject_of_the_certificate_and_its_roles(door, tmp_path) -> None:
    for who, roles in (("vera", {"*": "viewer"}), ("adam", {"*": "admin"}), ("eve", {})):
        done = fleetctl(_env(door, tmp_path, who), "auth", "whoami", "-o", "json")
        assert done.returncode == 0, done.stderr
        assert json.loads(done.stdout) == {"subject": who, "via": "certificate", "groups": [], "roles": roles}
    table = fleetctl(_env(door, tmp_path, "olga"), "auth", "whoami")
    assert "olga (by certificate)" in table.stdout and "operator" in table.stdout


def test_whoami_prints_the_role_in_each_fleet_the_roles_file_names(door, tmp_path) -> None:
    env = _env(door, tmp_path, "fiona")
    done = fleetctl(env, "auth", "whoami", "-o", "json")
    assert json.loads(done.stdout)["roles"] == {"*": "viewer", "gpu-east": "admin", "gpu-west": "operator"}
    table = fleetctl(env, "auth", "whoami")
    assert table.returncode == 0, table.stderr
    assert table.stdout.splitlines()[0].strip() == "fiona (by certificate)", table.stdout
    rows = [[cell.strip() for cell in line.strip().strip("│").split("│")] for line in table.stdout.splitlines()]
    assert [r for r in rows if len(r) == 2] == [
        ["every fleet", "viewer"],
        ["gpu-east", "admin"],
        ["gpu-west", "operator"],
    ], table.stdout
    # With a token whose group is an operator everywhere, every fleet's role is the higher one.
    token = door.issuer.token("fiona", groups=["sre"])
    done = fleetctl(door.client_env(tmp_path / "fiona-token", token=token), "auth", "whoami", "-o", "json")
    assert json.loads(done.stdout)["roles"] == {"*": "operator", "gpu-east": "admin", "gpu-west": "operator"}


def test_a_token_of_the_issuer_proves_its_subject_and_groups(door, tmp_path) -> None:
    env = door.client_env(tmp_path / "tara", token=door.issuer.token("tara", groups=["sre"]))
    done = fleetctl(env, "auth", "whoami", "-o", "json")
    assert json.loads(done.stdout) == {"subject": "tara", "via": "token", "groups": ["sre"], "roles": {"*": "operator"}}
    done = fleetctl(env, "firmware", "baseline", "set", str(BASELINE))
    assert (
        done.stderr
        == f"error: denied: firmware baseline set needs the admin role in fleet {door.fleet} (tara holds operator)\n"
    )


@pytest.mark.parametrize(
    ("token", "error"),
    [
        (
            lambda issuer: issuer.token("tara", key=rsa.generate_private_key(65537, 2048)),
            "Signature verification failed",
        ),
        (lambda issuer: issuer.token("tara", exp=1), "Signature has expired"),
        (lambda issuer: issuer.token("tara", aud="someone-else"), "Audience doesn't match"),
        (lambda issuer: issuer.token("tara", iss="https://evil.test"), "Invalid issuer"),
        (lambda issuer: issuer.token("runbook:x"), "not a subject fleetctl records"),
    ],
)
def test_a_token_not_proven_is_refused_in_one_line(door, tmp_path, token, error) -> None:
    env = door.client_env(tmp_path / "t", token=token(door.issuer))
    done = fleetctl(env, "node", "drain", "node-1", "--reason", "x")
    assert done.returncode == 1 and done.stderr.startswith("error: not authenticated: ") and error in done.stderr
    assert done.stderr.count("\n") == 1


def test_without_a_certificate_of_the_fleet_ca_nothing_gets_through(door, tmp_path) -> None:
    anonymous = door.client_env(tmp_path / "anonymous")
    done = fleetctl(anonymous, "node", "undrain", "node-1")
    assert done.stderr == "error: not authenticated: no verified client certificate and no bearer token\n"
    stranger = Authority(tmp_path, "another-ca").client("adam")
    done = fleetctl(door.client_env(tmp_path / "stranger", cert=stranger), "node", "undrain", "node-1")
    assert done.stderr == "error: not authenticated: the client certificate is not one the fleet CA issued\n"


def test_a_file_argument_must_be_one_the_cli_sent(door) -> None:
    argv = ["node", "import", "/etc/hostname"]
    with pytest.raises(ApiError, match="denied: /etc/hostname: a file argument must be a file the CLI sent"):
        run_remote(_settings(door, "adam"), {"argv": argv, "fleet": None, "as": None, "files": {}})


def test_the_decisions_are_counted(door) -> None:
    with pytest.raises(ApiError):
        run_remote(_settings(door, "vera"), {"argv": ["node", "retire", "n1"], "fleet": None, "as": None, "files": {}})
    context = ssl.create_default_context(cafile=str(door.ca.cert_path))
    with urllib.request.urlopen(f"{door.url}/metrics", context=context, timeout=30) as response:
        text = response.read().decode()
    counted = [line for line in text.splitlines() if line.startswith("fleetctl_audit_requests_total{")]
    assert any('decision="denied"' in line and 'role="admin"' in line for line in counted), counted


def test_a_caller_cannot_send_the_headers_nginx_sets(door) -> None:
    """X-Client-Verify and X-Client-Cert are nginx's to set: sent by a caller without a
    certificate (here claiming adam's, a real one of the fleet CA), they never arrive."""
    from urllib.parse import quote

    cert_pem = door.certs["adam"][0].read_text()
    request = urllib.request.Request(
        f"{door.url}/v1/whoami",
        headers={"X-Client-Verify": "SUCCESS", "X-Client-Cert": quote(cert_pem)},
    )
    context = ssl.create_default_context(cafile=str(door.ca.cert_path))
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(request, context=context, timeout=30)
    assert refused.value.code == 401
    assert json.loads(refused.value.read()) == {
        "error": "not authenticated: no verified client certificate and no bearer token"
    }


def test_a_grant_or_a_revocation_takes_effect_without_a_restart(door, tmp_path) -> None:
    roles = door.directory / "roles.yaml"
    env = _env(door, tmp_path, "vera")
    before = roles.read_text()
    try:
        roles.write_text(before.replace("vera: viewer", "vera: {'*': viewer, " + door.fleet + ": operator}"))
        assert json.loads(fleetctl(env, "auth", "whoami", "-o", "json").stdout)["roles"] == {
            "*": "viewer",
            door.fleet: "operator",
        }
        roles.write_text(before.replace("vera: viewer", "vera: [broken"))
        done = fleetctl(env, "node", "undrain", "node-1")
        assert done.returncode == 1 and done.stderr.startswith("error: the front door cannot read its roles file: ")
    finally:
        roles.write_text(before)
    assert json.loads(fleetctl(env, "auth", "whoami", "-o", "json").stdout)["roles"] == {"*": "viewer"}
