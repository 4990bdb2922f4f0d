"""Resolving the Temporal connection from fleetctl's settings, TEMPORAL_* variables and a
Temporal TOML profile, the way the `temporal` CLI resolves it."""

from __future__ import annotations

import os

import pytest

from fleetctl.config import ConfigError, load_settings
from fleetctl.connections.temporal_client import is_local_address, parse_tls_flag, resolve

PROFILE = """
[profile.default]
address = "temporal.example:7233"
namespace = "from-default-profile"

[profile.prod]
address = "prod.tmprl.example:7233"
namespace = "fleet.prod"
api_key = "profile-secret-key"

[profile.mtls]
address = "mtls.example:7233"
namespace = "fleet"
[profile.mtls.tls]
server_name = "temporal.internal"
server_ca_cert_path = "{ca}"
client_cert_path = "{cert}"
client_key_path = "{key}"
"""


@pytest.fixture
def pem_files(tmp_path):
    files = {}
    for name in ("ca", "cert", "key"):
        files[name] = tmp_path / f"{name}.pem"
        files[name].write_bytes(f"-----BEGIN {name}-----\n".encode())
    return files


@pytest.fixture
def profile_file(tmp_path, pem_files):
    path = tmp_path / "temporal.toml"
    path.write_text(PROFILE.format(**{k: str(v) for k, v in pem_files.items()}))
    return path


def connection(env: dict[str, str], flags: dict | None = None):
    return resolve(load_settings(flags=flags, env=env, config_file=os.devnull), env=env)


def test_nothing_configured_is_the_local_dev_server_in_clear_text(tmp_path):
    (tmp_path / "empty.toml").write_text("")
    conn = connection({"TEMPORAL_CONFIG_FILE": str(tmp_path / "empty.toml")})
    assert conn.connect_kwargs() == {"target_host": "127.0.0.1:7233", "namespace": "default", "tls": False}


def test_the_default_profile_fills_what_fleetctl_leaves_at_defaults(profile_file):
    conn = connection({"TEMPORAL_CONFIG_FILE": str(profile_file)})
    assert (conn.address, conn.namespace, conn.tls) == ("temporal.example:7233", "from-default-profile", False)


def test_a_named_profile_with_an_api_key_turns_tls_on_and_never_shows_the_key(profile_file):
    conn = connection({"TEMPORAL_CONFIG_FILE": str(profile_file), "TEMPORAL_PROFILE": "prod"})
    kwargs = conn.connect_kwargs()
    assert kwargs["target_host"] == "prod.tmprl.example:7233" and kwargs["namespace"] == "fleet.prod"
    assert kwargs["api_key"] == "profile-secret-key" and kwargs["tls"] is not False
    assert "profile-secret-key" not in conn.describe() + repr(conn)


def test_an_mtls_profile_reads_the_certificates(profile_file, pem_files):
    conn = connection({"TEMPORAL_CONFIG_FILE": str(profile_file)}, {"temporal_profile": "mtls"})
    assert conn.tls.domain == "temporal.internal"
    assert conn.tls.client_cert == pem_files["cert"].read_bytes()
    assert conn.tls.client_private_key == pem_files["key"].read_bytes()
    assert conn.tls.server_root_ca_cert == pem_files["ca"].read_bytes()
    assert conn.describe().startswith("mtls.example:7233 namespace fleet, mTLS")


def test_environment_beats_the_profile_and_flags_beat_the_environment(profile_file):
    env = {
        "TEMPORAL_CONFIG_FILE": str(profile_file),
        "TEMPORAL_PROFILE": "prod",
        "TEMPORAL_NAMESPACE": "from-env",
        "TEMPORAL_ADDRESS": "env.example:7233",
    }
    conn = connection(env, {"temporal_address": "flag.example:7233"})
    assert (conn.address, conn.namespace) == ("flag.example:7233", "from-env")


def test_the_temporal_cli_environment_names_give_mtls(pem_files):
    conn = connection(
        {
            "TEMPORAL_TLS_CLIENT_CERT_PATH": str(pem_files["cert"]),
            "TEMPORAL_TLS_CLIENT_KEY_PATH": str(pem_files["key"]),
            "TEMPORAL_TLS_SERVER_CA_CERT_PATH": str(pem_files["ca"]),
        }
    )
    assert conn.tls.client_cert == pem_files["cert"].read_bytes() and conn.tls.domain is None


@pytest.mark.parametrize(
    "env, message",
    [
        ({"TEMPORAL_TLS_CLIENT_CERT_PATH": "{cert}"}, "needs both a client certificate and its key"),
        ({"TEMPORAL_TLS_CLIENT_KEY_PATH": "{key}"}, "needs both a client certificate and its key"),
        (
            {"TEMPORAL_TLS_SERVER_CA_CERT_PATH": "/nonexistent/ca.pem"},
            "temporal_tls_ca_path: cannot read /nonexistent/ca.pem",
        ),
        ({"TEMPORAL_TLS": "false", "TEMPORAL_API_KEY": "k"}, "temporal_tls is false but TLS settings"),
        ({"TEMPORAL_TLS": "maybe"}, "'maybe' is not a boolean"),
        (
            {"TEMPORAL_CONFIG_FILE": "/nonexistent/temporal.toml"},
            "Temporal config file /nonexistent/temporal.toml does not exist",
        ),
        ({"TEMPORAL_CONFIG_FILE": "{profile}", "TEMPORAL_PROFILE": "nope"}, "Profile 'nope' not found"),
    ],
)
def test_bad_settings_are_one_line(env, message, pem_files, profile_file):
    env = {k: v.format(profile=profile_file, **pem_files) for k, v in env.items()}
    with pytest.raises(ConfigError) as err:
        connection(env)
    assert message in str(err.value) and "\n" not in str(err.value)


@pytest.mark.parametrize("raw, expected", [("", None), ("true", True), ("1", True), ("False", False), ("off", False)])
def test_parse_tls_flag(raw, expected):
    assert parse_tls_flag(raw) is expected


@pytest.mark.parametrize("raw", ["maybe", " true", "enabled"])
def test_parse_tls_flag_refuses_what_is_no_boolean(raw):
    with pytest.raises(ConfigError, match=r"setting temporal_tls: .* is not a boolean"):
        parse_tls_flag(raw)


@pytest.mark.parametrize(
    "address, local",
    [
        ("127.0.0.1:7233", True),
        ("localhost:7233", True),
        ("[::1]:7233", True),
        ("127.8.0.1:7233", True),
        ("10.0.0.5:7233", False),
        ("temporal.internal:7233", False),
        ("[2001:db8::1]:7233", False),
    ],
)
def test_is_local_address(address, local):
    assert is_local_address(address) is local
