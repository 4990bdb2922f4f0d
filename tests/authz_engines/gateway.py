"""The shipped gateway (deploy/nginx/temporal-gateway.conf and the maps `fleetctl engines
gateway-config` writes) run by Debian's nginx on a free 127.0.0.1 port, in front of the
session's Temporal dev server, with certificates from a test CA."""

from __future__ import annotations

import getpass
import subprocess
from dataclasses import dataclass
from pathlib import Path

from fleetctl.connections.temporal_server import free_port, wait_for_port
from tests.production.mtls_proxy import Authority, nginx_binary

REPO = Path(__file__).resolve().parents[2]
TEMPLATE = REPO / "deploy" / "nginx" / "temporal-gateway.conf"
# nginx's start: a bound derived from nothing fleetctl configures, as the mTLS proxy's.
NGINX_STARTS_WITHIN_S = 30

HTTP = """
worker_processes 1;
daemon off;
pid {dir}/nginx.pid;
events {{ worker_connections 256; }}
http {{
    access_log {dir}/access.log;
    client_body_temp_path {dir}/body;
    proxy_temp_path {dir}/proxy;
    fastcgi_temp_path {dir}/fastcgi;
    uwsgi_temp_path {dir}/uwsgi;
    scgi_temp_path {dir}/scgi;
    include {server};
}}
"""


@dataclass
class Gateway:
    address: str
    process: subprocess.Popen
    directory: Path

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            self.process.wait(10)


def deployed_config(directory: Path, port: int, upstream: str, ca: Authority, server: tuple[Path, Path]) -> str:
    """The shipped server block with this test's paths, port and upstream in place of the
    deployment's: every other line as shipped."""
    replacements = {
        "/etc/fleetctl/temporal-gateway-maps.conf": str(directory / "maps.conf"),
        "listen 7233 ssl": f"listen 127.0.0.1:{port} ssl",
        "/etc/fleetctl/gateway/server.pem": str(server[0]),
        "/etc/fleetctl/gateway/server.key": str(server[1]),
        "/etc/fleetctl/gateway/clients-ca.pem": str(ca.cert_path),
        "grpc://127.0.0.1:7234": f"grpc://{upstream}",
        "/var/log/nginx/temporal-gateway-refusals.log": str(directory / "refusals.log"),
    }
    text = TEMPLATE.read_text()
    for shipped, here in replacements.items():
        assert text.count(shipped) == 1, f"{TEMPLATE} no longer holds {shipped!r} once"
        text = text.replace(shipped, here)
    return text


def start_gateway(directory: Path, upstream: str, ca: Authority, maps: str) -> Gateway:
    """nginx running the shipped gateway with `maps` (the output of `engines gateway-config`)."""
    port = free_port()
    (directory / "maps.conf").write_text(maps)
    server = directory / "temporal-gateway.conf"
    server.write_text(deployed_config(directory, port, upstream, ca, ca.server("gateway")))
    conf = directory / "nginx.conf"
    conf.write_text(HTTP.format(dir=directory, server=server))
    user = f"user {getpass.getuser()};\n"
    conf.write_text(user + conf.read_text())
    log = open(directory / "nginx.log", "w")
    process = subprocess.Popen(
        [nginx_binary(), "-p", str(directory), "-c", str(conf), "-e", str(directory / "error.log")],
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    wait_for_port("127.0.0.1", port, NGINX_STARTS_WITHIN_S, process)
    return Gateway(f"127.0.0.1:{port}", process, directory)
