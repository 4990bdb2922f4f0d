"""Settings: command-line flags > environment > config file > defaults.

Each resolved value remembers where it came from, so `fleetctl config` can tell an
operator why fleetctl is talking to the database or Temporal it is talking to.
"""

from __future__ import annotations

import getpass
import os
import socket
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any, Mapping

ENV_VARS = {
    "db_url": "FLEETCTL_DB_URL",
    "temporal_address": "TEMPORAL_ADDRESS",
    "temporal_namespace": "TEMPORAL_NAMESPACE",
    "task_queue": "FLEETCTL_TASK_QUEUE",
    "fleet": "FLEETCTL_FLEET",
    "operator": "FLEETCTL_OPERATOR",
    "known_hosts": "FLEETCTL_KNOWN_HOSTS",
    "accept_new_host_keys": "FLEETCTL_ACCEPT_NEW_HOST_KEYS",
    "ssh_key_file": "FLEETCTL_SSH_KEY_FILE",
    "suites_dir": "FLEETCTL_SUITES_DIR",
    "sim_time_scale": "FLEETCTL_SIM_TIME_SCALE",
    "guard_max_unavailable_fleet": "FLEETCTL_GUARD_MAX_UNAVAILABLE_FLEET",
    "guard_max_unavailable_rack": "FLEETCTL_GUARD_MAX_UNAVAILABLE_RACK",
    "guard_storm_fraction": "FLEETCTL_GUARD_STORM_FRACTION",
    "guard_storm_window_s": "FLEETCTL_GUARD_STORM_WINDOW_S",
    "sim_seed": "FLEETCTL_SIM_SEED",
    "slurm_conf": "SLURM_CONF",
    "kubeconfig": "KUBECONFIG",
    "kube_context": "FLEETCTL_KUBE_CONTEXT",
    "kube_drain_policy": "FLEETCTL_KUBE_DRAIN_POLICY",
    "kube_do_not_evict_annotation": "FLEETCTL_KUBE_DO_NOT_EVICT_ANNOTATION",
    "kube_infrastructure_owner_kinds": "FLEETCTL_KUBE_INFRASTRUCTURE_OWNER_KINDS",
    "kube_eviction_grace_period_s": "FLEETCTL_KUBE_EVICTION_GRACE_PERIOD_S",
    "kube_critical_taint_effect": "FLEETCTL_KUBE_CRITICAL_TAINT_EFFECT",
    "kube_health_condition": "FLEETCTL_KUBE_HEALTH_CONDITION",
    "bmc_username": "FLEETCTL_BMC_USERNAME",
    "bmc_password": "FLEETCTL_BMC_PASSWORD",
    "bmc_verify_tls": "FLEETCTL_BMC_VERIFY_TLS",
    "remediation_shadow": "FLEETCTL_REMEDIATION_SHADOW",
    "runbooks_dir": "FLEETCTL_RUNBOOKS_DIR",
    "lemon_threshold": "FLEETCTL_LEMON_THRESHOLD",
    "lemon_window_days": "FLEETCTL_LEMON_WINDOW_DAYS",
    "webhook_url": "FLEETCTL_WEBHOOK_URL",
    "webhook_token": "FLEETCTL_WEBHOOK_TOKEN",
}
CONFIG_FILE_ENV = "FLEETCTL_CONFIG"
# Never printed or logged: `fleetctl config` says only whether each is set.
SECRET_SETTINGS = ("bmc_password", "webhook_token")


class ConfigError(ValueError):
    pass


def default_data_dir() -> Path:
    from platformdirs import user_data_dir

    return Path(user_data_dir("fleetctl", appauthor=False))


def default_config_file() -> Path:
    from platformdirs import user_config_dir

    return Path(user_config_dir("fleetctl", appauthor=False)) / "config.yaml"


@dataclass
class Settings:
    db_url: str = ""
    temporal_address: str = "127.0.0.1:7233"
    temporal_namespace: str = "default"
    task_queue: str = "fleetctl"
    # One capacity guard per fleet: several fleets can share a Temporal namespace.
    fleet: str = "default"
    operator: str = ""
    known_hosts: str = "~/.ssh/known_hosts"
    accept_new_host_keys: bool = False
    ssh_key_file: str = ""
    # A directory of suite YAML files that add to or replace the shipped ones.
    suites_dir: str = ""
    # Capacity guard: most of the fleet / of a rack that automation may take out, and the
    # storm that opens the circuit breaker (fraction of production nodes failing in the window).
    guard_max_unavailable_fleet: float = 0.10
    guard_max_unavailable_rack: float = 0.25
    guard_storm_fraction: float = 0.20
    guard_storm_window_s: float = 600.0
    # Simulated nodes: 1.0 runs checks for their real typical duration, 0 makes them instant.
    sim_time_scale: float = 0.0
    sim_seed: int = 0
    # Schedulers: the slurm.conf Slurm's commands read (empty: Slurm's own default), and the
    # kubeconfig and context for the Kubernetes API (empty: kubectl's defaults).
    slurm_conf: str = ""
    kubeconfig: str = ""
    kube_context: str = ""
    # Kubernetes drains (fleetctl.schedulers.kubernetes): per-namespace or per-label rules,
    # `namespace:NAME=ACTION` or `label:KEY=VALUE=ACTION` separated by commas, ACTION one of
    # evict, wait, delete (after the drain's deadline); pods no rule names are evicted.
    kube_drain_policy: str = ""
    # Pods annotated with this key set to "true" are never evicted by a drain.
    kube_do_not_evict_annotation: str = "fleetctl.io/do-not-evict"
    # Owner kinds whose pods are the node's infrastructure, not work (comma-separated): the
    # Slurm operator's NodeSet runs slurmd on SUNK nodes.
    kube_infrastructure_owner_kinds: str = "NodeSet"
    # Grace period given to evicted or deleted pods; -1: each pod's own.
    kube_eviction_grace_period_s: int = -1
    # The state taint's effect for a critical fault (NoExecute: untolerating pods leave at once).
    kube_critical_taint_effect: str = "NoExecute"
    # The node condition fleetctl's health verdict is written to.
    kube_health_condition: str = "GpuHealthy"
    # BMCs (Redfish): one service account for the fleet. The password is never logged.
    bmc_username: str = ""
    bmc_password: str = ""
    bmc_verify_tls: bool = True
    # Shadow mode: every automated remediation records what it would do and does nothing,
    # so new runbooks earn trust before they act.
    remediation_shadow: bool = False
    # Runbooks directory (empty: the shipped runbooks/).
    runbooks_dir: str = ""
    # A lemon: remediated this many times within this many days goes to RMA, not production.
    lemon_threshold: int = 3
    lemon_window_days: float = 7.0
    # Where RMA evidence bundles and runbook notifications are POSTed (empty: nowhere), and
    # the bearer token sent with them (never logged, never in a bundle).
    webhook_url: str = ""
    webhook_token: str = ""
    sources: dict[str, str] = field(default_factory=dict, repr=False, compare=False)

    def identity(self) -> str:
        """Who is acting and from where, recorded on every state change: the configured
        operator (`name@where`; a bare name gets this host) or the OS user@host."""
        host = socket.gethostname()
        if self.operator:
            return self.operator if "@" in self.operator else f"{self.operator}@{host}"
        return f"{getpass.getuser()}@{host}"


def _coerce(name: str, raw: Any) -> Any:
    kind = {f.name: f.type for f in fields(Settings)}[name]
    try:
        if kind == "bool":
            return raw if isinstance(raw, bool) else str(raw).lower() in ("1", "true", "yes", "on")
        if kind == "float":
            return float(raw)
        if kind == "int":
            return int(raw)
    except (TypeError, ValueError):
        raise ConfigError(f"setting {name}: {raw!r} is not a valid {kind}") from None
    return str(raw)


def load_settings(
    flags: Mapping[str, Any] | None = None,
    env: Mapping[str, str] | None = None,
    config_file: str | Path | None = None,
) -> Settings:
    env = os.environ if env is None else env
    settings = Settings()
    settings.db_url = f"sqlite:///{default_data_dir() / 'fleet.db'}"
    settings.sources = {f.name: "default" for f in fields(Settings) if f.name != "sources"}

    path = Path(config_file or env.get(CONFIG_FILE_ENV) or default_config_file()).expanduser()
    if path.exists():
        import yaml

        try:
            data = yaml.safe_load(path.read_text()) or {}
        except yaml.YAMLError as exc:
            raise ConfigError(f"{path}: not valid YAML ({exc.__class__.__name__})") from None
        if not isinstance(data, dict):
            raise ConfigError(f"{path}: expected a mapping of settings")
        for key, value in data.items():
            if key not in settings.sources:
                raise ConfigError(f"{path}: unknown setting {key!r}")
            setattr(settings, key, _coerce(key, value))
            settings.sources[key] = f"file {path}"
    elif config_file:
        raise ConfigError(f"config file {path} does not exist")

    for key, var in ENV_VARS.items():
        if env.get(var):
            setattr(settings, key, _coerce(key, env[var]))
            settings.sources[key] = f"env {var}"

    for key, value in (flags or {}).items():
        if value is not None:
            setattr(settings, key, _coerce(key, value))
            settings.sources[key] = "flag"
    _check_kubernetes(settings)
    return settings


def _check_kubernetes(settings: Settings) -> None:
    """The Kubernetes drain settings, checked once here so a bad one stops at startup."""
    from fleetctl.schedulers.kubernetes import kubernetes_options

    try:
        kubernetes_options(settings)
    except ValueError as exc:
        source = settings.sources.get(str(exc).partition(":")[0], "")
        raise ConfigError(f"setting {exc}" + (f" (from {source})" if source else "")) from None
