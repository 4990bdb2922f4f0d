"""How fleetctl reaches Temporal, resolved like the `temporal` CLI resolves it: address,
namespace, TLS (server CA, server name), mTLS (client certificate and key) and API key.

Sources, strongest first: fleetctl's flags, environment variables (the `temporal` CLI's own
TEMPORAL_* names), fleetctl's config file, then the profile of Temporal's TOML config file
(TEMPORAL_CONFIG_FILE or the `temporal` CLI's default path; profile TEMPORAL_PROFILE or
"default"), read by the SDK's `temporalio.envconfig`, so an operator's existing profile just
works. What comes out is the keyword arguments of `Client.connect`.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from fleetctl.config import ConfigError, Settings, parse_bool

if TYPE_CHECKING:
    from temporalio.envconfig import ClientConfigProfile

DEFAULT_ADDRESS = "127.0.0.1:7233"
DEFAULT_NAMESPACE = "default"


@dataclass(frozen=True)
class TemporalConnection:
    address: str
    namespace: str
    tls: Any = False  # False, or a temporalio.service.TLSConfig
    api_key: str | None = field(default=None, repr=False)
    rpc_metadata: Mapping[str, str] = field(default_factory=dict, repr=False)
    # Where the certificates came from, for messages (paths, never contents).
    tls_note: str = ""
    # What each part is and where it came from, for `fleetctl config`: {part: (shown, source)};
    # a secret is shown as "(set)", inline certificate data as "(inline)".
    sources: Mapping[str, tuple[str, str]] = field(default_factory=dict, repr=False, compare=False)

    def connect_kwargs(self) -> dict[str, Any]:
        """Keyword arguments for temporalio.client.Client.connect."""
        kwargs: dict[str, Any] = {"target_host": self.address, "namespace": self.namespace, "tls": self.tls}
        if self.api_key:
            kwargs["api_key"] = self.api_key
        if self.rpc_metadata:
            kwargs["rpc_metadata"] = dict(self.rpc_metadata)
        return kwargs

    def describe(self) -> str:
        """One line for operators: where, which namespace, how secured; no secret in it."""
        parts = [f"{self.address} namespace {self.namespace}"]
        if self.tls is not False:
            parts.append(self.tls_note or "TLS")
        if self.api_key:
            parts.append("API key (set)")
        return ", ".join(parts)

    def unreachable_hint(self) -> str:
        """What to check when Temporal cannot be reached over this connection."""
        if self.tls is False:
            return "start one with `fleetctl dev server` or set TEMPORAL_ADDRESS"
        # A proxy refusing a client certificate answers after the handshake, which the
        # client reports as an unrelated protocol error: name the settings to check.
        return (
            "check the client certificate and key (TEMPORAL_TLS_CLIENT_CERT_PATH, TEMPORAL_TLS_CLIENT_KEY_PATH), "
            "the server CA and name (TEMPORAL_TLS_SERVER_CA_CERT_PATH, TEMPORAL_TLS_SERVER_NAME) and the API key"
        )

    def is_local(self) -> bool:
        return is_local_address(self.address)


def is_local_address(address: str) -> bool:
    """Whether host:port names this machine (a loopback address or localhost)."""
    host = address.rsplit(":", 1)[0] if address.count(":") == 1 or address.startswith("[") else address
    host = host.strip("[]")
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def parse_tls_flag(raw: str) -> bool | None:
    """The temporal_tls setting: empty is "not said", otherwise strictly a boolean
    (fleetctl.config.parse_bool)."""
    return parse_bool(raw, "setting temporal_tls") if raw else None


def _given(settings: Settings, name: str) -> bool:
    """Set by a flag, the environment or fleetctl's config file (not a default)."""
    return settings.sources.get(name, "default") != "default" and bool(getattr(settings, name))


def _profile(settings: Settings, env: Mapping[str, str]) -> ClientConfigProfile:
    from temporalio.envconfig import ClientConfigProfile

    config_file = settings.temporal_config_file
    if config_file and not Path(config_file).expanduser().exists():
        raise ConfigError(f"Temporal config file {config_file} does not exist")
    try:
        return ClientConfigProfile.load(
            profile=settings.temporal_profile or None,
            config_source=Path(config_file).expanduser() if config_file else None,
            override_env_vars=dict(env),
        )
    except Exception as exc:  # noqa: BLE001 - the SDK's ConfigError lives in its native bridge
        raise ConfigError(f"Temporal config: {str(exc).strip().splitlines()[0] if str(exc).strip() else exc}") from None


def _read(setting: str, source: Any) -> bytes | None:
    """A certificate or key: a path (str/Path) is read here so a missing file is one line
    naming the setting; inline data (bytes, from a profile's *_data) is used as it is."""
    if source is None or source == "":
        return None
    if isinstance(source, bytes):
        return source
    path = Path(str(source)).expanduser()
    try:
        return path.read_bytes()
    except OSError as exc:
        raise ConfigError(f"{setting}: cannot read {path} ({exc.strerror or exc.__class__.__name__})") from None


def resolve(settings: Settings, env: Mapping[str, str] | None = None) -> TemporalConnection:
    """The connection the settings describe, with the Temporal profile filling what fleetctl's
    own settings leave at their defaults. Raises ConfigError (one line) for a bad setting."""
    import os

    from temporalio.service import TLSConfig

    env = os.environ if env is None else env
    profile = _profile(settings, env)
    ptls = profile.tls
    where = (
        f"profile {settings.temporal_profile or env.get('TEMPORAL_PROFILE') or 'default'} of "
        f"{settings.temporal_config_file or env.get('TEMPORAL_CONFIG_FILE') or 'the temporal CLI config file'}"
    )
    sources: dict[str, tuple[str, str]] = {}

    def pick(name: str, from_profile: Any) -> Any:
        value, source = (
            (getattr(settings, name), settings.sources.get(name, "flag"))
            if _given(settings, name)
            else (from_profile, where)
            if from_profile
            else (None, "default")
        )
        shown = "(set)" if name == "temporal_api_key" and value else "(inline)" if isinstance(value, bytes) else value
        sources[name] = (str(shown or ""), source)
        return value

    address = pick("temporal_address", profile.address) or settings.temporal_address or DEFAULT_ADDRESS
    namespace = pick("temporal_namespace", profile.namespace) or settings.temporal_namespace or DEFAULT_NAMESPACE
    api_key = pick("temporal_api_key", profile.api_key) or None
    ca = pick("temporal_tls_ca_path", ptls.server_root_ca_cert if ptls else None)
    cert = pick("temporal_tls_cert_path", ptls.client_cert if ptls else None)
    key = pick("temporal_tls_key_path", ptls.client_private_key if ptls else None)
    server_name = pick("temporal_tls_server_name", ptls.server_name if ptls else None) or None

    said = parse_tls_flag(settings.temporal_tls) if _given(settings, "temporal_tls") else None
    tls_source = settings.sources.get("temporal_tls", "flag") if said is not None else "default"
    if said is None and ptls is not None:
        said, tls_source = (not ptls.disabled), where
    if bool(cert) != bool(key):
        raise ConfigError(
            "Temporal mTLS needs both a client certificate and its key "
            "(temporal_tls_cert_path / TEMPORAL_TLS_CLIENT_CERT_PATH and "
            "temporal_tls_key_path / TEMPORAL_TLS_CLIENT_KEY_PATH)"
        )
    wants_tls = bool(ca or cert or server_name or api_key)
    if said is False and wants_tls:
        # Sending an API key or a client certificate in clear text is never what was meant.
        raise ConfigError(
            "temporal_tls is false but TLS settings (CA, client certificate, server name or API key) are given"
        )
    sources["temporal_address"] = (address, sources["temporal_address"][1])
    sources["temporal_namespace"] = (namespace, sources["temporal_namespace"][1])
    sources["temporal_tls"] = (
        "on" if said or wants_tls else "off",
        tls_source if said is not None else "the other TLS settings" if wants_tls else "default",
    )
    if not (said or wants_tls):
        return TemporalConnection(address, namespace, False, None, profile.grpc_meta, sources=sources)

    note = "mTLS" if cert else "TLS"
    if isinstance(ca, (str, Path)) and ca:
        note += f" (CA {ca})"
    tls = TLSConfig(
        domain=server_name,
        server_root_ca_cert=_read("temporal_tls_ca_path", ca),
        client_cert=_read("temporal_tls_cert_path", cert),
        client_private_key=_read("temporal_tls_key_path", key),
    )
    return TemporalConnection(address, namespace, tls, api_key, profile.grpc_meta, note, sources)
