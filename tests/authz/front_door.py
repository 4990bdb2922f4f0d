"""The front door as deployed, on 127.0.0.1: `fleetctl api serve` on a unix socket behind
Debian's nginx running deploy/nginx/fleetctl-api.conf (its paths replaced by the test's), real
client certificates from a CA made here, and an OIDC issuer's JWKS served here with a key made
here that signs the tests' tokens."""

from __future__ import annotations

import getpass
import json
import os
import subprocess
import sys
import threading
import time
import uuid
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import jwt
from cryptography.hazmat.primitives.asymmetric import rsa

from fleetctl.connections.temporal_server import free_port, wait_for_port
from tests.production.mtls_proxy import Authority, nginx_binary

REPO = Path(__file__).resolve().parents[2]
FLEETCTL = str(Path(sys.executable).parent / "fleetctl")
ISSUER = "https://idp.test"
AUDIENCE = "fleetctl"
# `fleetctl api serve` binds its socket within this on a loaded machine (an import of the CLI
# and the database's migration first).
STARTED_WITHIN_S = 60

NGINX_MAIN = """
worker_processes 1;
daemon off;
user {user};
pid {dir}/nginx.pid;
events {{ worker_connections 256; }}
http {{
    access_log off;
    client_body_temp_path {dir}/body;
    proxy_temp_path {dir}/proxy;
    fastcgi_temp_path {dir}/fastcgi;
    uwsgi_temp_path {dir}/uwsgi;
    scgi_temp_path {dir}/scgi;
    include {dir}/fleetctl-api.conf;
}}
"""


class Issuer:
    """An OIDC issuer's signing key and its JWKS, served on 127.0.0.1."""

    def __init__(self) -> None:
        self.key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        self.kid = uuid.uuid4().hex[:8]
        jwk = json.loads(jwt.algorithms.RSAAlgorithm.to_jwk(self.key.public_key()))
        body = json.dumps({"keys": [{**jwk, "kid": self.kid, "use": "sig", "alg": "RS256"}]}).encode()

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *_args) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.jwks_url = f"http://127.0.0.1:{self.server.server_address[1]}/jwks.json"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def token(self, subject: str, groups=(), key=None, **claims) -> str:
        now = int(time.time())
        payload = {"iss": ISSUER, "aud": AUDIENCE, "sub": subject, "groups": list(groups), "iat": now}
        payload |= {"exp": now + 600, **claims}
        return jwt.encode(payload, key or self.key, algorithm="RS256", headers={"kid": self.kid})

    def stop(self) -> None:
        self.server.shutdown()


@dataclass
class FrontDoor:
    url: str
    directory: Path
    ca: Authority
    db_url: str
    temporal_address: str
    task_queue: str
    fleet: str
    processes: list[subprocess.Popen] = field(default_factory=list)

    def stop(self) -> None:
        for process in self.processes:
            if process.poll() is None:
                process.terminate()
                process.wait(10)

    def client_env(self, home: Path, cert: tuple[Path, Path] | None = None, token: str | None = None) -> dict[str, str]:
        """The environment of an operator's machine: the front door's URL and a certificate or a
        token; the database for reads (the audit trail), no Temporal."""
        home.mkdir(parents=True, exist_ok=True)
        env = {
            "PATH": os.environ["PATH"],
            "HOME": str(home),
            "FLEETCTL_CONFIG": os.devnull,
            "FLEETCTL_API_URL": self.url,
            "FLEETCTL_API_CA_PATH": str(self.ca.cert_path),
            "FLEETCTL_DB_URL": self.db_url,
            "FLEETCTL_FLEET": self.fleet,
            "TEMPORAL_ADDRESS": "127.0.0.1:1",  # a write that ran here would fail to reach it
        }
        if cert:
            env["FLEETCTL_API_CERT_PATH"], env["FLEETCTL_API_KEY_PATH"] = map(str, cert)
        if token:
            (home / "token").write_text(token)
            env["FLEETCTL_API_TOKEN_FILE"] = str(home / "token")
        return env


def fleetctl(env: dict[str, str], *args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run([FLEETCTL, *args], env=env, capture_output=True, text=True, timeout=timeout)


def start_front_door(
    directory: Path, roles: str, db_url: str, temporal_address: str, issuer: Issuer, ca: Authority
) -> FrontDoor:
    if not nginx_binary():
        from tests.support.services import missing_service

        missing_service("nginx", "not installed (Debian package nginx; make system-deps)")
    directory.mkdir(mode=0o700)
    (directory / "roles.yaml").write_text(roles)
    unique = uuid.uuid4().hex[:8]
    door = FrontDoor("", directory, ca, db_url, temporal_address, f"authz-{unique}", f"fleet-{unique}")
    (directory / "temporal.toml").write_text("")
    env = {
        "PATH": os.environ["PATH"],
        "HOME": str(directory),
        "TEMPORAL_CONFIG_FILE": str(directory / "temporal.toml"),
    }
    socket_path = directory / "run" / "api.sock"
    socket_path.parent.mkdir(mode=0o750)
    server = subprocess.Popen(
        [
            FLEETCTL,
            "--config",
            os.devnull,
            "--db-url",
            db_url,
            "--temporal-address",
            temporal_address,
            "--task-queue",
            door.task_queue,
            "--fleet",
            door.fleet,
            "api",
            "serve",
            "--socket",
            str(socket_path),
            "--roles",
            str(directory / "roles.yaml"),
            "--oidc-issuer",
            ISSUER,
            "--oidc-jwks-url",
            issuer.jwks_url,
            "--oidc-audience",
            AUDIENCE,
        ],
        env=env,
        stdout=open(directory / "api.log", "w"),
        stderr=subprocess.STDOUT,
    )
    door.processes.append(server)
    deadline = time.monotonic() + STARTED_WITHIN_S
    while not socket_path.is_socket():
        if server.poll() is not None or time.monotonic() > deadline:
            door.stop()
            raise RuntimeError(f"fleetctl api serve did not start: {(directory / 'api.log').read_text()}")
        time.sleep(0.1)

    server_cert, server_key = ca.server("front-door")
    port = free_port()
    site = (REPO / "deploy" / "nginx" / "fleetctl-api.conf").read_text()
    for shipped, here in (
        ("listen 443 ssl", f"listen 127.0.0.1:{port} ssl"),
        ("/etc/fleetctl/api/server.pem", str(server_cert)),
        ("/etc/fleetctl/api/server.key", str(server_key)),
        ("/etc/fleetctl/api/client-ca.pem", str(ca.cert_path)),
        ("/run/fleetctl-api/api.sock", str(socket_path)),
    ):
        assert shipped in site, shipped
        site = site.replace(shipped, here)
    (directory / "fleetctl-api.conf").write_text(site)
    (directory / "nginx.conf").write_text(NGINX_MAIN.format(user=getpass.getuser(), dir=directory))
    nginx = subprocess.Popen(
        [nginx_binary(), "-p", str(directory), "-c", str(directory / "nginx.conf"), "-e", str(directory / "error.log")],
        stdout=open(directory / "nginx.log", "w"),
        stderr=subprocess.STDOUT,
    )
    door.processes.append(nginx)
    try:
        wait_for_port("127.0.0.1", port, 30, nginx)
    except BaseException:
        door.stop()  # the front door started above is this module's to end
        raise
    door.url = f"https://127.0.0.1:{port}"
    return door
