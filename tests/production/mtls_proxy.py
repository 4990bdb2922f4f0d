"""A TLS-terminating gRPC proxy in front of the Temporal dev server, as a secured Temporal
looks to fleetctl: Debian's nginx with `grpc_pass`, verifying client certificates against a
CA this module makes (with `cryptography`), listening on 127.0.0.1 only."""

from __future__ import annotations

import datetime
import getpass
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from fleetctl.connections.temporal_server import free_port, wait_for_port

SERVER_NAME = "temporal.test"


def nginx_binary() -> str | None:
    return shutil.which("nginx") or next((p for p in ("/usr/sbin/nginx",) if Path(p).exists()), None)


def _name(common_name: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])


def _write_key(key, path: Path) -> None:
    path.write_bytes(
        key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    )
    path.chmod(0o600)


def _issue(subject: str, issuer_name: x509.Name, issuer_key, key, *, ca: bool, usage=None, sans=()) -> x509.Certificate:
    now = datetime.datetime.now(datetime.UTC)
    builder = (
        x509.CertificateBuilder()
        .subject_name(_name(subject))
        .issuer_name(issuer_name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
    )
    if ca:
        builder = builder.add_extension(
            x509.KeyUsage(
                digital_signature=True,
                key_cert_sign=True,
                crl_sign=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
    else:
        builder = builder.add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
        builder = builder.add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(issuer_key.public_key()), critical=False
        )
    if sans:
        builder = builder.add_extension(x509.SubjectAlternativeName(list(sans)), critical=False)
    return builder.sign(issuer_key, hashes.SHA256())


@dataclass
class Authority:
    """A CA and the certificates it issues, as PEM files in a directory."""

    directory: Path
    name: str

    def __post_init__(self) -> None:
        self.key = ec.generate_private_key(ec.SECP256R1())
        self.cert = _issue(self.name, _name(self.name), self.key, self.key, ca=True)
        self.cert_path = self.directory / f"{self.name}.pem"
        self.cert_path.write_bytes(self.cert.public_bytes(serialization.Encoding.PEM))

    def issue(self, name: str, usage, sans=()) -> tuple[Path, Path]:
        key = ec.generate_private_key(ec.SECP256R1())
        cert = _issue(name, self.cert.subject, self.key, key, ca=False, usage=usage, sans=sans)
        cert_path, key_path = self.directory / f"{name}.pem", self.directory / f"{name}.key"
        cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
        _write_key(key, key_path)
        return cert_path, key_path

    def server(self, name: str) -> tuple[Path, Path]:
        import ipaddress

        return self.issue(
            name,
            ExtendedKeyUsageOID.SERVER_AUTH,
            [x509.DNSName(SERVER_NAME), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))],
        )

    def client(self, name: str) -> tuple[Path, Path]:
        return self.issue(name, ExtendedKeyUsageOID.CLIENT_AUTH)


# Temporal's long polls last about a minute: the proxy must wait longer than that upstream.
NGINX_CONF = """
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
    client_max_body_size 8m;
    server {{
        listen 127.0.0.1:{port} ssl http2;
        ssl_certificate {server_cert};
        ssl_certificate_key {server_key};
        ssl_client_certificate {client_ca};
        ssl_verify_client on;
        location / {{
            grpc_pass grpc://{upstream};
            grpc_read_timeout 300s;
            grpc_send_timeout 300s;
        }}
    }}
}}
"""


@dataclass
class MtlsProxy:
    address: str
    ca_path: Path
    process: subprocess.Popen

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            self.process.wait(10)


def start_proxy(directory: Path, upstream: str, ca: Authority) -> MtlsProxy:
    """nginx on a free 127.0.0.1 port, serving a certificate from `ca` and accepting only
    client certificates `ca` issued."""
    server_cert, server_key = ca.server("proxy")
    port = free_port()
    conf = directory / "nginx.conf"
    conf.write_text(
        NGINX_CONF.format(
            user=getpass.getuser(),
            dir=directory,
            port=port,
            server_cert=server_cert,
            server_key=server_key,
            client_ca=ca.cert_path,
            upstream=upstream,
        )
    )
    log = open(directory / "nginx.log", "w")
    process = subprocess.Popen(
        [nginx_binary(), "-p", str(directory), "-c", str(conf), "-e", str(directory / "error.log")],
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    wait_for_port("127.0.0.1", port, 30, process)
    return MtlsProxy(f"127.0.0.1:{port}", ca.cert_path, process)
