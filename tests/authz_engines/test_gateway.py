"""The Temporal gateway as shipped (deploy/nginx/temporal-gateway.conf with the maps
`fleetctl engines gateway-config` writes), in front of a real Temporal dev server: a viewer's
certificate lists and queries workflows and is refused every other method of Temporal's API
with PERMISSION_DENIED; an operator's signals; a worker's certificate runs workflows; a
certificate the gateway does not know, or another CA's, gets nothing."""

from __future__ import annotations

import asyncio
import json
import os
import re
import subprocess
import sys
import uuid
from datetime import timedelta
from pathlib import Path

import pytest
import temporalio.api.operatorservice.v1 as operator_api
import temporalio.api.workflowservice.v1 as workflow_api
from temporalio.client import Client, TLSConfig
from temporalio.service import ConnectConfig, RPCError, RPCStatusCode, ServiceClient
from temporalio.worker import Worker

from fleetctl.authz.gateway import ALLOWED, OPERATOR_SERVICE, WORKFLOW_SERVICE, Caller, method_class, method_path
from fleetctl.db import queries
from fleetctl.db.engine import get_engine
from fleetctl.inventory.parse import parse_inventory
from fleetctl.workflows.api import node_workflow_id
from tests.authz_engines.counter_workflow import GatewayCounter
from tests.authz_engines.descriptors import all_methods
from tests.authz_engines.gateway import start_gateway
from tests.production.mtls_proxy import SERVER_NAME, Authority, nginx_binary
from tests.production.test_search_attributes import VISIBILITY_LAG_S
from tests.support.fleet import wait_for
from tests.support.roles import as_roles_file
from tests.support.services import missing_service

pytestmark = pytest.mark.temporal
FLEETCTL = str(Path(sys.executable).parent / "fleetctl")
ROLES = {"alice": "viewer", "olga": "operator", "adam": "admin"}
SERVICE = "fleet-worker"
CALLERS = {"alice": Caller.VIEWER, "olga": Caller.OPERATOR, "adam": Caller.ADMIN, SERVICE: Caller.SERVICE}
REFUSED_BY_GATEWAY = "the Temporal gateway: "
# A method the gateway lets through answers an empty request at once (an invalid argument);
# a long poll, through, waits for this and ends DEADLINE_EXCEEDED.
THROUGH_WITHIN = timedelta(seconds=2)
API = {WORKFLOW_SERVICE: ("workflow_service", workflow_api), OPERATOR_SERVICE: ("operator_service", operator_api)}


@pytest.fixture(scope="module")
def gateway(tmp_path_factory, temporal_address):
    if not nginx_binary():
        missing_service("nginx", "not installed (Debian package nginx; make system-deps)")
    directory = tmp_path_factory.mktemp("gateway")
    ca = Authority(directory, "fleet-ca")
    roles = directory / "engine-roles.yaml"
    roles.write_text(as_roles_file("".join(f"{subject}: {role}\n" for subject, role in ROLES.items())))
    maps = subprocess.run(
        [FLEETCTL, "engines", "gateway-config", "--roles", str(roles), "--service", SERVICE],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    ).stdout
    gateway = start_gateway(directory, temporal_address, ca, maps)
    yield gateway, ca
    gateway.stop()


def tls(ca: Authority, identity: tuple[Path, Path]) -> TLSConfig:
    cert, key = identity
    return TLSConfig(
        server_root_ca_cert=ca.cert_path.read_bytes(),
        client_cert=cert.read_bytes(),
        client_private_key=key.read_bytes(),
        domain=SERVER_NAME,
    )


async def connect(gateway, name: str, authority: Authority | None = None) -> Client:
    gw, ca = gateway
    return await Client.connect(gw.address, tls=tls(ca, (authority or ca).client(name)))


def _snake(name: str) -> str:
    return re.sub(r"(?<!^)(?=[A-Z])", "_", name).lower()


async def _call(service: ServiceClient, service_name: str, method: str) -> RPCError | None:
    """The error of `method` called with an empty request; None if it answered."""
    attribute, module = API[service_name]
    rpc = getattr(getattr(service, attribute), _snake(method))
    try:
        await rpc(getattr(module, f"{method}Request")(), timeout=THROUGH_WITHIN)
    except RPCError as exc:
        return exc
    return None


def curl_statuses(gateway, name: str, paths: list[str]) -> dict[str, tuple[str, str]]:
    """{path: (grpc-status, grpc-message)} of an empty POST to each path, the way a gRPC
    client sends one, as the gateway answers it in its headers (curl: one process, all paths)."""
    gw, ca = gateway
    cert, key = ca.client(name)
    base = f"https://{SERVER_NAME}:{gw.address.rsplit(':', 1)[1]}"
    done = subprocess.run(
        ["curl", "--silent", "--http2", "--cacert", str(ca.cert_path), "--cert", str(cert), "--key", str(key),
         "--resolve", f"{SERVER_NAME}:{gw.address.rsplit(':', 1)[1]}:127.0.0.1",
         "-H", "content-type: application/grpc", "-H", "te: trailers", "--data-binary", "",
         "--output", "/dev/null", "--write-out", "%{url_effective}\t%header{grpc-status}\t%header{grpc-message}\n",
         *(base + p for p in paths)],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    lines = [line.split("\t") for line in done.stdout.splitlines()]
    return {url.removeprefix(base): (status, message) for url, status, message in lines}


def test_a_certificate_with_no_role_is_refused_every_method(gateway) -> None:
    # The SDK cannot show this method by method: its connection starts with GetSystemInfo.
    paths = [method_path(s, m) for s, methods in all_methods().items() for m in methods]
    answered = curl_statuses(gateway, "stranger", paths)
    assert set(answered) == set(paths)
    assert set(answered.values()) == {("7", "the Temporal gateway: no role for this client certificate")}


def test_only_a_method_spelled_exactly_goes_through(gateway) -> None:
    start = method_path(WORKFLOW_SERVICE, "StartWorkflowExecution")
    spelled_otherwise = [start.replace("/Start", "/%53tart"), start + "?via=query", "/grpc.health.v1.Health/Check"]
    answered = curl_statuses(gateway, SERVICE, spelled_otherwise)
    refused = ("7", "the Temporal gateway: this method is refused to every caller")
    assert answered == dict.fromkeys(spelled_otherwise, refused)


@pytest.mark.parametrize("name", CALLERS)
async def test_each_certificate_reaches_exactly_the_methods_of_its_role(gateway, name) -> None:
    gw, ca = gateway
    caller = CALLERS.get(name)
    service = await ServiceClient.connect(
        ConnectConfig(target_host=gw.address, tls=tls(ca, ca.client(name)), lazy=True)
    )
    refused, through = [], []
    for service_name, methods in all_methods().items():
        for method in methods:
            error = await _call(service, service_name, method)
            by_gateway = error is not None and error.message.startswith(REFUSED_BY_GATEWAY)
            if by_gateway:
                assert error.status == RPCStatusCode.PERMISSION_DENIED, (method, error.status)
            kind = method_class(method_path(service_name, method))
            expected = caller is not None and kind in ALLOWED[caller]
            (through if not by_gateway else refused).append(method)
            assert by_gateway is not expected, f"{name} ({caller}) {method} ({kind}): {error}"
    assert refused if caller is not Caller.SERVICE else through
    if caller is Caller.VIEWER:
        assert {"StartWorkflowExecution", "SignalWorkflowExecution", "SignalWithStartWorkflowExecution",
                "UpdateWorkflowExecution", "TerminateWorkflowExecution", "ResetWorkflowExecution",
                "CreateSchedule", "PollWorkflowTaskQueue"} <= set(refused)  # fmt: skip


async def test_a_viewer_lists_and_queries_an_operator_signals_a_viewer_cannot(gateway) -> None:
    queue = f"gateway-{uuid.uuid4().hex[:8]}"
    workflow_id = f"counter-{uuid.uuid4().hex[:8]}"
    service, viewer, operator = [await connect(gateway, n) for n in (SERVICE, "alice", "olga")]
    async with Worker(service, task_queue=queue, workflows=[GatewayCounter]):
        started = await service.start_workflow(GatewayCounter.run, id=workflow_id, task_queue=queue)
        try:
            query = f"WorkflowId = '{workflow_id}'"
            await wait_for(
                lambda: _listed(viewer, query), VISIBILITY_LAG_S, "the viewer to list the workflow through the gateway"
            )
            as_viewer = viewer.get_workflow_handle(workflow_id)
            assert await as_viewer.query(GatewayCounter.count) == 0
            with pytest.raises(RPCError) as refused:
                await as_viewer.signal(GatewayCounter.bump)
            assert refused.value.status == RPCStatusCode.PERMISSION_DENIED
            assert "SignalWorkflowExecution needs operator" in refused.value.message
            await operator.get_workflow_handle(workflow_id).signal(GatewayCounter.bump)
            # The far side: the workflow's own count, read back by the viewer.
            assert await as_viewer.query(GatewayCounter.count) == 1
            signals = [
                e
                async for e in started.fetch_history_events()
                if e.HasField("workflow_execution_signaled_event_attributes")
            ]
            assert len(signals) == 1
        finally:
            await started.terminate("test over")


async def test_a_viewers_cli_reads_through_the_gateway_and_is_refused_a_write_in_one_line(gateway, tmp_path) -> None:
    gw, ca = gateway
    node = f"gw-{uuid.uuid4().hex[:6]}"
    # The node's workflow, started by a service (no worker runs it): what `node event` signals.
    service = await connect(gateway, SERVICE)
    started = await service.start_workflow("NodeLifecycle", id=node_workflow_id(node), task_queue=f"idle-{node}")
    cert, key = ca.client("alice")
    (tmp_path / "temporal.toml").write_text("")
    env = {
        "PATH": os.environ["PATH"],
        "HOME": str(tmp_path),
        "FLEETCTL_CONFIG": os.devnull,
        "TEMPORAL_CONFIG_FILE": str(tmp_path / "temporal.toml"),
        "FLEETCTL_DB_URL": f"sqlite:///{tmp_path / 'fleet.db'}",
        "TEMPORAL_ADDRESS": gw.address,
        "TEMPORAL_TLS_SERVER_CA_CERT_PATH": str(ca.cert_path),
        "TEMPORAL_TLS_SERVER_NAME": SERVER_NAME,
        "TEMPORAL_TLS_CLIENT_CERT_PATH": str(cert),
        "TEMPORAL_TLS_CLIENT_KEY_PATH": str(key),
    }
    queries.upsert_nodes(
        get_engine(env["FLEETCTL_DB_URL"]),
        parse_inventory(f"nodes:\n  - {{name: {node}, address: sim://{node}, profile: h100-sxm}}\n"),
    )

    def fleetctl(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([FLEETCTL, *args], env=env, capture_output=True, text=True, timeout=120)

    listed = await asyncio.to_thread(fleetctl, "schedule", "list")
    assert listed.returncode == 0, listed.stderr
    event = await asyncio.to_thread(fleetctl, "node", "event", node, "--xid", "79")
    history = [e async for e in started.fetch_history_events()]
    await started.terminate("test over")
    for refused, method, needed in (
        (event, "SignalWorkflowExecution", "operator"),
        (
            await asyncio.to_thread(fleetctl, "schedule", "create", "job-sync", "--name", node),
            "CreateSchedule",
            "admin",
        ),
    ):
        lines = refused.stderr.strip().splitlines()
        assert refused.returncode == 1 and len(lines) == 1, refused.stderr
        assert f"the Temporal gateway: /{WORKFLOW_SERVICE}/{method} needs {needed}" in lines[0], lines[0]
    assert not [e for e in history if e.HasField("workflow_execution_signaled_event_attributes")]


async def _listed(client: Client, query: str) -> bool:
    return [w.id async for w in client.list_workflows(query)] != []


async def test_an_unknown_certificate_and_another_cas_get_nothing(gateway, tmp_path) -> None:
    with pytest.raises(RuntimeError, match="no role for this client certificate"):
        await connect(gateway, "stranger")
    with pytest.raises(RuntimeError) as rogue:
        await connect(gateway, "alice", Authority(tmp_path, "rogue-ca"))
    assert REFUSED_BY_GATEWAY not in str(rogue.value)  # refused in the TLS handshake, before any method


# nginx writes a request's log line as the request ends, just after its answer has gone: a
# bound of the order of the gateway's own answer to a refused call, with the loaded machine's margin.
LOGGED_WITHIN_S = 10


def _refusal_lines(gw) -> list[dict]:
    log = gw.directory / "refusals.log"
    return [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []


async def test_each_refusal_is_logged_and_imported_into_the_audit_trail_once(gateway, tmp_path) -> None:
    gw, _ = gateway
    signal = method_path(WORKFLOW_SERVICE, "SignalWorkflowExecution")
    create = method_path(WORKFLOW_SERVICE, "CreateSchedule")
    before = len(_refusal_lines(gw))
    answered = curl_statuses(gateway, "alice", [signal, create, method_path(WORKFLOW_SERVICE, "ListSchedules")])
    assert [answered[p][0] for p in (signal, create)] == ["7", "7"] and answered[
        method_path(WORKFLOW_SERVICE, "ListSchedules")
    ][0] != "7"
    await wait_for(lambda: len(_refusal_lines(gw)) >= before + 2, LOGGED_WITHIN_S, "the refusals' log lines")
    assert [(r["subject_dn"], r["caller"], r["method"]) for r in _refusal_lines(gw)[before:]] == [
        ("CN=alice", "viewer", signal),
        ("CN=alice", "viewer", create),
    ]  # the call let through is not a refusal

    env = {"PATH": os.environ["PATH"], "HOME": str(tmp_path), "FLEETCTL_CONFIG": os.devnull}
    env |= {"FLEETCTL_DB_URL": f"sqlite:///{tmp_path / 'fleet.db'}", "FLEETCTL_FLEET": "gpu-east"}
    log = str(gw.directory / "refusals.log")

    def fleetctl(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([FLEETCTL, *args], env=env, capture_output=True, text=True, timeout=120)

    lines = len(_refusal_lines(gw))
    imported = fleetctl("engines", "import-refusals", log)
    assert imported.stdout == f"{log}: {lines} refusals recorded in the audit trail, 0 already there\n", imported.stderr
    again = fleetctl("engines", "import-refusals", log)
    assert again.stdout == f"{log}: 0 refusals recorded in the audit trail, {lines} already there\n", again.stderr
    rows = json.loads(fleetctl("audit", "--denied", "--subject", "alice", "-o", "json").stdout)
    assert [(r["command"], r["fleet"], r["role_needed"], r["role_held"], r["reason"]) for r in rows[-2:]] == [
        ("temporal-gateway SignalWorkflowExecution", "gpu-east", "operator", "viewer",
         f"the Temporal gateway: {signal} needs operator"),
        ("temporal-gateway CreateSchedule", "gpu-east", "admin", "viewer", f"the Temporal gateway: {create} needs admin"),
    ]  # fmt: skip


def test_a_log_that_is_not_the_gateways_is_refused_in_one_line_and_nothing_recorded(gateway, tmp_path) -> None:
    gw, _ = gateway
    curl_statuses(gateway, "alice", [method_path(WORKFLOW_SERVICE, "TerminateWorkflowExecution")])
    log = tmp_path / "refusals.log"
    log.write_text((gw.directory / "refusals.log").read_text() + "GET / HTTP/1.1 200\n")
    env = {"PATH": os.environ["PATH"], "HOME": str(tmp_path), "FLEETCTL_CONFIG": os.devnull}
    env |= {"FLEETCTL_DB_URL": f"sqlite:///{tmp_path / 'fleet.db'}"}
    upgraded = subprocess.run([FLEETCTL, "db", "upgrade"], env=env, capture_output=True, text=True, timeout=120)
    assert upgraded.returncode == 0, upgraded.stderr
    done = subprocess.run(
        [FLEETCTL, "engines", "import-refusals", str(log)], env=env, capture_output=True, text=True, timeout=120
    )
    last = len(log.read_text().splitlines())
    assert (done.returncode, done.stderr) == (
        2,
        f"error: {log}: line {last}: not a line of the gateway's refusal log\n",
    )
    audit = subprocess.run([FLEETCTL, "audit"], env=env, capture_output=True, text=True, timeout=120)
    assert (audit.stdout, audit.stderr.strip()) == ("", "No audited requests."), audit.stdout + audit.stderr
