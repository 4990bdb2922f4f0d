"""The front door (`fleetctl api serve`): the one place write commands run, each for an
authenticated subject holding the role it needs, each asked write recorded in the audit trail.

It listens on a unix socket that only nginx reaches: nginx terminates TLS, verifies client
certificates against the fleet's CA and passes the verified certificate in X-Client-Cert
(with X-Client-Verify: SUCCESS), setting both headers itself so a caller cannot; a bearer
token is verified here against the issuer's keys. An allowed command runs as a child process
of this one, with this host's database and Temporal credentials (which no client holds) and
the subject as its actor; its output and exit code are the answer.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from prometheus_client import CollectorRegistry, Counter, generate_latest
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from fleetctl.authz.decide import Decision, authorize
from fleetctl.authz.identity_client import Identity, NotAuthenticated, OidcVerifier, from_certificate
from fleetctl.authz.roles import RolesError, RolesFile, RolesWatch
from fleetctl.db.audit import record_exit, record_request

if TYPE_CHECKING:
    from sqlalchemy.engine import Engine

    from fleetctl.config import Settings

MAX_REQUEST = 10 * 1024 * 1024  # the files a write names, and its words
MAX_ARGS = 1000
TIMED_OUT = 124  # the exit code of a command stopped at the front door's bound, as timeout(1)'s
# Settings the client holds and the front door must not: a command run here sent back to a
# front door would go round for ever.
_CLIENT_ENV = ("FLEETCTL_API_URL", "FLEETCTL_API_CERT_PATH", "FLEETCTL_API_KEY_PATH", "FLEETCTL_API_TOKEN_FILE")


class RequestRefused(ValueError):
    """A request that is not a command line; one line."""


@dataclass
class AskedCommand:
    """A command line a client asks the front door to run."""

    argv: list[str]
    fleet: str
    requested_actor: str | None
    files: dict[str, str]


def parse_request(body: Any, default_fleet: str) -> AskedCommand:
    if not isinstance(body, dict):
        raise RequestRefused("expected a JSON object with argv")
    argv, fleet, actor, files = body.get("argv"), body.get("fleet"), body.get("as"), body.get("files") or {}
    if not isinstance(argv, list) or not argv or len(argv) > MAX_ARGS or not all(isinstance(a, str) for a in argv):
        raise RequestRefused(f"argv: expected 1 to {MAX_ARGS} words")
    if fleet is not None and not isinstance(fleet, str):
        raise RequestRefused("fleet: expected a name")
    if actor is not None and not isinstance(actor, str):
        raise RequestRefused("as: expected a name")
    if not isinstance(files, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in files.items()):
        raise RequestRefused("files: expected {argument: content}")
    return AskedCommand(argv, fleet or default_fleet, actor, files)


@dataclass
class FrontDoor:
    roles_path: Path
    engine: Engine
    child_env: dict[str, str]
    default_fleet: str
    oidc: OidcVerifier | None = None
    command_timeout_s: float = 600.0
    registry: CollectorRegistry = field(default_factory=CollectorRegistry)

    def __post_init__(self) -> None:
        self._roles = RolesWatch(self.roles_path)
        self.requests = Counter(
            "fleetctl_audit_requests",
            "Writes asked of the front door, by decision and the role the command needs.",
            ["decision", "role"],
            registry=self.registry,
        )

    def roles(self) -> RolesFile:
        """The roles file, read again when it changes: granting or revoking needs no restart."""
        return self._roles.current()

    def identify(self, request: Request) -> Identity:
        authorization = request.headers.get("authorization", "")
        if authorization:
            scheme, _, token = authorization.partition(" ")
            if scheme.lower() != "bearer" or not token:
                raise NotAuthenticated("the Authorization header must be 'Bearer TOKEN'")
            if self.oidc is None:
                raise NotAuthenticated("this front door accepts no tokens (no --oidc-issuer)")
            return self.oidc.verify(token)
        if request.headers.get("x-client-verify") == "SUCCESS" and request.headers.get("x-client-cert"):
            return from_certificate(request.headers["x-client-cert"])
        raise NotAuthenticated("no verified client certificate and no bearer token")

    def decide(self, identity: Identity, asked: AskedCommand) -> tuple[Decision, str, list[str], list[str]]:
        """(decision, command path, its arguments, the nodes it names)."""
        from fleetctl.cli.main import noun_or_none
        from fleetctl.cli.remote import nodes_named, parameters, path_parameters, resolve

        roles = self.roles()
        resolved = resolve(asked.argv, noun_or_none)
        if resolved is None:
            decision = authorize(identity.subject, roles, asked.argv[0], [], asked.fleet, groups=identity.groups)
            return decision, asked.argv[0], asked.argv[1:], []
        path, rest, command = resolved
        decision = authorize(
            identity.subject,
            roles,
            path,
            rest,
            asked.fleet,
            groups=identity.groups,
            requested_actor=asked.requested_actor,
        )
        values = parameters(command, path, rest)
        for name in path_parameters(command):
            named = values.get(name)
            for value in named if isinstance(named, (list, tuple)) else [named]:
                if decision.allowed and value is not None and Path(value) not in {Path(k) for k in asked.files}:
                    decision = Decision(
                        False, f"{value}: a file argument must be a file the CLI sent", needed=decision.needed
                    )
        return decision, path, rest, nodes_named(command, path, rest)

    def run(self, asked: AskedCommand, actor: str) -> tuple[int, str, str]:
        """Run the command line as `actor`; (exit code, stdout, stderr)."""
        with tempfile.TemporaryDirectory(prefix="fleetctl-api-") as directory:
            written: dict[str, str] = {}
            for number, (argument, content) in enumerate(asked.files.items()):
                path = Path(directory) / f"{number}-{Path(argument).name or 'file'}"
                path.write_text(content)
                written[argument] = str(path)
            argv = [_with_files(arg, written) for arg in asked.argv]
            command = [sys.executable, "-c", "from fleetctl.cli.main import run; run()", "--fleet", asked.fleet, *argv]
            try:
                done = subprocess.run(
                    command,
                    env={**self.child_env, "FLEETCTL_API_ACTOR": actor},
                    stdin=subprocess.DEVNULL,
                    capture_output=True,
                    text=True,
                    timeout=self.command_timeout_s,
                )
            except subprocess.TimeoutExpired:
                return TIMED_OUT, "", f"error: stopped after {self.command_timeout_s:g} s at the front door\n"
            return done.returncode, done.stdout, done.stderr


def _with_files(arg: str, written: dict[str, str]) -> str:
    if arg in written:
        return written[arg]
    option, equals, value = arg.partition("=")
    return f"{option}={written[value]}" if arg.startswith("--") and equals and value in written else arg


def child_environment(settings: Settings, environ: dict[str, str]) -> dict[str, str]:
    """The environment of the commands the front door runs: its own, with every setting it was
    given by flag made a variable (the child takes no flags of this process), without the
    client's."""
    from fleetctl.config import ENV_VARS

    env = {k: v for k, v in environ.items() if k not in _CLIENT_ENV and k != "FLEETCTL_OPERATOR"}
    for name, var in ENV_VARS.items():
        if settings.sources.get(name) == "flag" and var not in _CLIENT_ENV:
            value = getattr(settings, name)
            env[var] = ("true" if value else "false") if isinstance(value, bool) else str(value)
    config_files = {s.removeprefix("file ") for s in settings.sources.values() if s.startswith("file ")}
    if config_files:
        env["FLEETCTL_CONFIG"] = config_files.pop()
    return env


def app_of(door: FrontDoor) -> Starlette:
    async def run(request: Request) -> Response:
        try:
            identity = door.identify(request)
        except NotAuthenticated as exc:
            return JSONResponse({"error": f"not authenticated: {exc}"}, 401)
        body = await request.body()
        if len(body) > MAX_REQUEST:
            return JSONResponse({"error": f"the request is larger than {MAX_REQUEST} bytes"}, 413)
        try:
            asked = parse_request(json.loads(body), door.default_fleet)
        except (ValueError, RequestRefused) as exc:
            return JSONResponse({"error": f"bad request: {exc}"}, 400)
        try:
            decision, path, rest, nodes = await run_in_threadpool(door.decide, identity, asked)
        except (RolesError, OSError) as exc:
            return JSONResponse({"error": f"the front door cannot read its roles file: {exc}"}, 503)
        return await _audited(door, identity, asked, decision, (path, rest, nodes))

    async def whoami(request: Request) -> Response:
        try:
            identity = door.identify(request)
            roles = door.roles().fleets_of(identity.subject, identity.groups)
        except NotAuthenticated as exc:
            return JSONResponse({"error": f"not authenticated: {exc}"}, 401)
        except (RolesError, OSError) as exc:
            return JSONResponse({"error": f"the front door cannot read its roles file: {exc}"}, 503)
        return JSONResponse(
            {
                "subject": identity.subject,
                "via": identity.via,
                "groups": list(identity.groups),
                "roles": {fleet: role.value for fleet, role in roles.items()},
            }
        )

    async def metrics(_request: Request) -> Response:
        return Response(generate_latest(door.registry), media_type="text/plain; version=0.0.4")

    return Starlette(
        routes=[
            Route("/v1/run", run, methods=["POST"]),
            Route("/v1/whoami", whoami, methods=["GET"]),
            Route("/metrics", metrics, methods=["GET"]),
        ]
    )


async def _audited(
    door: FrontDoor,
    identity: Identity,
    asked: AskedCommand,
    decision: Decision,
    what: tuple[str, Sequence[str], Sequence[str]],
) -> Response:
    """Record the request, then (allowed) run it and record how it ended."""
    path, rest, nodes = what
    audit_id = await run_in_threadpool(
        lambda: record_request(
            door.engine,
            subject=identity.subject,
            actor=decision.actor,
            fleet=asked.fleet,
            command=path,
            args=rest,
            nodes=nodes,
            allowed=decision.allowed,
            role_needed=decision.needed.value if decision.needed else "",
            role_held=decision.held.value if decision.held else "",
            reason=decision.reason,
        )
    )
    door.requests.labels(
        "allowed" if decision.allowed else "denied", decision.needed.value if decision.needed else ""
    ).inc()
    if not decision.allowed:
        return JSONResponse({"error": f"denied: {decision.reason}"}, 403)
    code, stdout, stderr = await run_in_threadpool(door.run, asked, decision.actor)
    await run_in_threadpool(record_exit, door.engine, audit_id, code)
    return JSONResponse({"exit_code": code, "stdout": stdout, "stderr": stderr})


def serve(door: FrontDoor, socket_path: Path) -> None:
    """Serve on `socket_path` until SIGTERM. The socket's directory must be closed to other
    users: whoever can connect to the socket can claim any certificate nginx would verify."""
    import uvicorn

    directory = socket_path.parent
    if directory.stat().st_mode & 0o007:
        raise RequestRefused(f"{directory}: open to other users; the front door's socket needs chmod o-rwx")
    if socket_path.is_socket():
        socket_path.unlink()
    config = uvicorn.Config(app_of(door), uds=str(socket_path), log_level="warning", access_log=False)
    uvicorn.Server(config).run()
