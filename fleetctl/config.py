"""Settings: command-line flags > environment > config file > defaults.

Each resolved value remembers where it came from, so `fleetctl config` can tell an
operator why fleetctl is talking to the database or Temporal it is talking to.
"""

from __future__ import annotations

import math
import os
import re
import socket
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from enum import Enum
from pathlib import Path
from typing import TYPE_CHECKING, Any

from fleetctl.jobs.spares import MAX_SPARES_PER_ISLAND

if TYPE_CHECKING:
    from fleetctl.checks.xid_policy import XidPolicy
    from fleetctl.nodes.capacity import GuardPolicy

ENV_VARS = {
    "db_url": "FLEETCTL_DB_URL",
    "temporal_address": "TEMPORAL_ADDRESS",
    "temporal_namespace": "TEMPORAL_NAMESPACE",
    # The `temporal` CLI's own names, so one environment serves both (fleetctl.connections.temporal_client).
    "temporal_profile": "TEMPORAL_PROFILE",
    "temporal_config_file": "TEMPORAL_CONFIG_FILE",
    "temporal_tls": "TEMPORAL_TLS",
    "temporal_tls_ca_path": "TEMPORAL_TLS_SERVER_CA_CERT_PATH",
    "temporal_tls_server_name": "TEMPORAL_TLS_SERVER_NAME",
    "temporal_tls_cert_path": "TEMPORAL_TLS_CLIENT_CERT_PATH",
    "temporal_tls_key_path": "TEMPORAL_TLS_CLIENT_KEY_PATH",
    "temporal_api_key": "TEMPORAL_API_KEY",
    "task_queue": "FLEETCTL_TASK_QUEUE",
    "bulk_slot_share": "FLEETCTL_BULK_SLOT_SHARE",
    "worker_lanes": "FLEETCTL_WORKER_LANES",
    "worker_bulk_nice": "FLEETCTL_WORKER_BULK_NICE",
    "worker_gc_young": "FLEETCTL_WORKER_GC_YOUNG",
    "bulk_activities_per_s": "FLEETCTL_BULK_ACTIVITIES_PER_S",
    "fleet": "FLEETCTL_FLEET",
    "operator": "FLEETCTL_OPERATOR",
    "known_hosts": "FLEETCTL_KNOWN_HOSTS",
    "accept_new_host_keys": "FLEETCTL_ACCEPT_NEW_HOST_KEYS",
    "ssh_key_file": "FLEETCTL_SSH_KEY_FILE",
    "ssh_jump_host": "FLEETCTL_SSH_JUMP_HOST",
    "suites_dir": "FLEETCTL_SUITES_DIR",
    "profiles_dir": "FLEETCTL_PROFILES_DIR",
    "xid_policy": "FLEETCTL_XID_POLICY",
    "agent_sample_confirmations": "FLEETCTL_AGENT_SAMPLE_CONFIRMATIONS",
    "agent_sample_grace_s": "FLEETCTL_AGENT_SAMPLE_GRACE_S",
    "agent_watch_flap_window_s": "FLEETCTL_AGENT_WATCH_FLAP_WINDOW_S",
    "agent_watch_flaps": "FLEETCTL_AGENT_WATCH_FLAPS",
    "agent_watch_errors_per_hour": "FLEETCTL_AGENT_WATCH_ERRORS_PER_HOUR",
    "agent_watch_stuck_s": "FLEETCTL_AGENT_WATCH_STUCK_S",
    "sim_time_scale": "FLEETCTL_SIM_TIME_SCALE",
    "guard_max_unavailable_fleet": "FLEETCTL_GUARD_MAX_UNAVAILABLE_FLEET",
    "guard_max_unavailable_rack": "FLEETCTL_GUARD_MAX_UNAVAILABLE_RACK",
    "guard_storm_fraction": "FLEETCTL_GUARD_STORM_FRACTION",
    "guard_storm_window_s": "FLEETCTL_GUARD_STORM_WINDOW_S",
    "sim_seed": "FLEETCTL_SIM_SEED",
    "slurm_conf": "SLURM_CONF",
    "slurm_host": "FLEETCTL_SLURM_HOST",
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
    "bmc_allow_http": "FLEETCTL_BMC_ALLOW_HTTP",
    "remediation_shadow": "FLEETCTL_REMEDIATION_SHADOW",
    "automation_dry_run": "FLEETCTL_AUTOMATION_DRY_RUN",
    "runbooks_dir": "FLEETCTL_RUNBOOKS_DIR",
    "lemon_threshold": "FLEETCTL_LEMON_THRESHOLD",
    "lemon_window_days": "FLEETCTL_LEMON_WINDOW_DAYS",
    "suspect_after_unreachable": "FLEETCTL_SUSPECT_AFTER_UNREACHABLE",
    "agent_silence_s": "FLEETCTL_AGENT_SILENCE_S",
    "stall_after_s": "FLEETCTL_STALL_AFTER_S",
    "stall_watch_s": "FLEETCTL_STALL_WATCH_S",
    "spares_per_island": "FLEETCTL_SPARES_PER_ISLAND",
    "webhook_url": "FLEETCTL_WEBHOOK_URL",
    "webhook_token": "FLEETCTL_WEBHOOK_TOKEN",
    "prometheus_url": "FLEETCTL_PROMETHEUS_URL",
    "prometheus_token": "FLEETCTL_PROMETHEUS_TOKEN",
    "prometheus_ca_path": "FLEETCTL_PROMETHEUS_CA_PATH",
    "prometheus_timeout_s": "FLEETCTL_PROMETHEUS_TIMEOUT_S",
    "prometheus_node_label": "FLEETCTL_PROMETHEUS_NODE_LABEL",
    "straggler_window_s": "FLEETCTL_STRAGGLER_WINDOW_S",
    "straggler_threshold": "FLEETCTL_STRAGGLER_THRESHOLD",
    "straggler_min_nodes": "FLEETCTL_STRAGGLER_MIN_NODES",
    "straggler_interval_s": "FLEETCTL_STRAGGLER_INTERVAL_S",
    "straggler_policy": "FLEETCTL_STRAGGLER_POLICY",
    "hang_policy": "FLEETCTL_HANG_POLICY",
    "hang_cadence_factor": "FLEETCTL_HANG_CADENCE_FACTOR",
    "hang_idle_pct": "FLEETCTL_HANG_IDLE_PCT",
    "hang_window_s": "FLEETCTL_HANG_WINDOW_S",
    "hang_interval_s": "FLEETCTL_HANG_INTERVAL_S",
    "external_drain_watch_s": "FLEETCTL_EXTERNAL_DRAIN_WATCH_S",
    "external_drain_policy": "FLEETCTL_EXTERNAL_DRAIN_POLICY",
    # Retention (fleetctl.db.retention), together.
    "retention_raw_output_days": "FLEETCTL_RETENTION_RAW_OUTPUT_DAYS",
    "retention_check_days": "FLEETCTL_RETENTION_CHECK_DAYS",
    "retention_health_event_days": "FLEETCTL_RETENTION_HEALTH_EVENT_DAYS",
    "retention_interval_s": "FLEETCTL_RETENTION_INTERVAL_S",
    "retention_audit_days": "FLEETCTL_RETENTION_AUDIT_DAYS",
    # The front door (fleetctl.authz): where the CLI sends its writes, and what proves who it is.
    "api_url": "FLEETCTL_API_URL",
    "api_ca_path": "FLEETCTL_API_CA_PATH",
    "api_cert_path": "FLEETCTL_API_CERT_PATH",
    "api_key_path": "FLEETCTL_API_KEY_PATH",
    "api_token_file": "FLEETCTL_API_TOKEN_FILE",
    "api_actor": "FLEETCTL_API_ACTOR",
}
CONFIG_FILE_ENV = "FLEETCTL_CONFIG"


# Never printed or logged: `fleetctl config` says only whether each is set.
class WorkerLanes(str, Enum):
    """Which lanes a worker process serves (the worker_lanes setting)."""

    BOTH = "both"
    CRITICAL = "critical"
    BULK = "bulk"


WORKER_LANES = tuple(lanes.value for lanes in WorkerLanes)

SECRET_SETTINGS = ("bmc_password", "webhook_token", "temporal_api_key", "prometheus_token")


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
    # Temporal's TOML profile (empty: TEMPORAL_PROFILE's or "default") and file (empty: the
    # `temporal` CLI's default path); TLS and mTLS; the API key (never printed). What these
    # leave unset the profile gives (fleetctl.connections.temporal_client). temporal_tls is empty
    # (decided by the other settings: any of them turns TLS on), true or false.
    temporal_profile: str = ""
    temporal_config_file: str = ""
    temporal_tls: str = ""
    temporal_tls_ca_path: str = ""
    temporal_tls_server_name: str = ""
    temporal_tls_cert_path: str = ""
    temporal_tls_key_path: str = ""
    temporal_api_key: str = ""
    task_queue: str = "fleetctl"
    # Each worker serves two lanes (workflows.worker): the task queue above for the workflows
    # and every activity that is not bulk, `<task_queue>-bulk` for the bulk (checks, sweep
    # batches, scans, firmware flashes, hardware steps), each with activity slots of its own.
    # Bulk work takes at most this share of the worker's slots; the rest are never bulk's, so
    # an XID 79's drain, job restart and guard grant never wait behind a sweep's checks.
    bulk_slot_share: float = 0.5
    # Which lanes this worker process serves: both (one process, slots split as above), or one
    # (`critical` and `bulk` processes side by side, each with every slot of its own). A bulk-only
    # process lowers its own CPU priority by worker_bulk_nice, so on a shared host a sweep's
    # checks never take the CPU an XID 79's drain needs (the slots alone do not: one Python
    # process's lanes share its interpreter).
    worker_lanes: str = "both"
    worker_bulk_nice: int = 10
    # A worker's young generation: the objects Python allocates between collections. A worker
    # caches up to a thousand workflow runs, each with its own copy of its workflow's module
    # (the sandbox imports it per run): about 450,000 objects that a full collection walks with
    # the interpreter held, 130-260 ms on a 2-core host. At CPython's 700, each activation's
    # short-lived objects outlived collections, were promoted, and a full collection followed
    # about every 2 s: about one moment in thirteen an XID 79 would wait for one (decision 34).
    worker_gc_young: int = 20_000
    # Bulk activities started per second across every worker of the bulk lane, held by the
    # Temporal server (the task queue's rate limit); 0: no limit. Real checks take seconds to
    # minutes, so a sweep needs a few a second; checks that end at once (a simulated fleet,
    # a fleet of unreachable nodes) would otherwise keep the server and the database busy
    # for as long as the sweep runs, and every critical task with them.
    bulk_activities_per_s: float = 0.0
    # One capacity guard per fleet: several fleets can share a Temporal namespace.
    fleet: str = "default"
    operator: str = ""
    known_hosts: str = "~/.ssh/known_hosts"
    accept_new_host_keys: bool = False
    ssh_key_file: str = ""
    # [user@]host[:port] of the SSH jump host (bastion) every SSH connection goes through (nodes,
    # slurm_host) unless a node's inventory entry names its own `jump`; empty: direct.
    ssh_jump_host: str = ""
    # A directory of suite YAML files that add to or replace the shipped ones.
    suites_dir: str = ""
    # A directory of site GPU profiles (checks/profiles' schema) added to the packaged ones;
    # checks.profiles reads FLEETCTL_PROFILES_DIR itself, so every process sees the same.
    profiles_dir: str = ""
    # The site's Xid and signature policy (checks.xid_policy): a YAML file that demotes or
    # promotes codes and signatures and sets count-in-window drains; empty: NVIDIA's catalog
    # alone. Every sender and the judge read it; a worker or agent refuses to start on a broken one.
    xid_policy: str = ""
    # A critical finding the agent samples (nvidia-smi, `dcgmi health`), unlike a kernel log
    # line, is a reading that can race a GPU reset or a driver reload: it becomes an event
    # only once this many consecutive samples show it (the samples after the first are taken
    # at once, not at the next interval) and not within agent_sample_grace_s of the boot or
    # of the driver's load. 2 is the finding and one re-sample: a one-off miss never drains,
    # and a GPU truly lost is also reported by the kernel (XID 79), which acts at once. The
    # grace is SageMaker HyperPod's: its health-monitoring agent gives NVML 2 minutes after
    # a boot before judging it.
    agent_sample_confirmations: int = 2
    agent_sample_grace_s: float = 120.0
    # The agent's node watch (fleetctl.agent.node_watch, docs/agent.md): a port down this many
    # times within the window is flapping (gpud's rule: 3); a port's corrected link errors
    # (symbol, receive, integrity, overrun, recovery) above this rate are reported; processes
    # in D state this long are stuck (the kernel's default hung-task timeout).
    agent_watch_flap_window_s: float = 600.0
    agent_watch_flaps: int = 3
    agent_watch_errors_per_hour: float = 600.0
    agent_watch_stuck_s: float = 120.0
    # Capacity guard: most of the fleet / of a rack that automation may take out, and the
    # storm that opens the circuit breaker (fraction of production nodes failing in the window).
    guard_max_unavailable_fleet: float = 0.10
    guard_max_unavailable_rack: float = 0.25
    guard_storm_fraction: float = 0.20
    guard_storm_window_s: float = 600.0
    # Per-fleet overrides of the four guard_* settings above, from the config file only:
    # `guard_fleets: {blue: {guard_max_unavailable_fleet: 0.2}}`. Each fleet's guard reads its
    # own from the worker's configuration (never from whichever command started it).
    guard_fleets: dict[str, dict[str, float]] = field(default_factory=dict)
    # Simulated nodes: 1.0 runs checks for their real typical duration, 0 makes them instant.
    sim_time_scale: float = 0.0
    sim_seed: int = 0
    # Schedulers: the slurm.conf Slurm's commands read (empty: Slurm's own default), and the
    # kubeconfig and context for the Kubernetes API (empty: kubectl's defaults).
    slurm_conf: str = ""
    # A restart placed on named nodes of the job's island (fleetctl.jobs.placement) that has not
    # started on them after this long falls back to any healthy node: one of them was taken
    # or is held by the scheduler. Slurm starts a job on free named nodes at the update.
    restart_island_wait_s: float = 60.0
    # Hot spares (fleetctl.jobs.spares): how many idle production nodes each island holds out of
    # normal scheduling for restarts to take first (Slurm: reservation fleetctl-spares-<island>).
    # 0 holds none (and gives back any held). Bounded by fleetctl.jobs.spares.MAX_SPARES_PER_ISLAND.
    spares_per_island: int = 0
    # [user@]host[:port] of a Slurm login or controller host to run Slurm's commands on over
    # SSH (host keys verified against known_hosts); empty: run them on the worker's host.
    # slurm_conf is then the path on that host.
    slurm_host: str = ""
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
    # Plain-http BMCs send the fleet-wide credentials in clear: refused unless allowed here.
    bmc_allow_http: bool = False
    # Shadow mode: every automated remediation records what it would do and does nothing,
    # so new runbooks earn trust before they act.
    remediation_shadow: bool = False
    # Dry run for all automation: the capacity guard answers every automated removal with what
    # it would decide (recorded, kind `dry_run`) and grants none, and every remediation runs in
    # shadow mode. Operators' own commands still act.
    automation_dry_run: bool = False
    # Runbooks directory (empty: the shipped runbooks/).
    runbooks_dir: str = ""
    # A lemon: remediated this many times within this many days goes to RMA, not production.
    lemon_threshold: int = 3
    lemon_window_days: float = 7.0
    # A production node whose check runs could not reach it this many times in a row is
    # suspect, and drained through the capacity guard (fleetctl.nodes.reachability).
    suspect_after_unreachable: int = 3
    # A production node whose agent (`fleetctl agent`, heard through `fleetctl events serve`)
    # has been silent this long is suspect too, drained the same way; 0 disables. Nodes
    # whose agent was never heard are not judged. Several heartbeat intervals (the agent's
    # default is 30 s), so a lost heartbeat or two is not a silence.
    agent_silence_s: float = 300.0
    # A node whose oldest queued work has waited this long, or whose workflow tasks keep
    # failing, is Stalled (fleetctl.nodes.stalls); each worker looks every stall_watch_s.
    stall_after_s: float = 300.0
    stall_watch_s: float = 30.0
    # Where RMA evidence bundles and runbook notifications are POSTed (empty: nowhere), and
    # the bearer token sent with them (never logged, never in a bundle).
    webhook_url: str = ""
    webhook_token: str = ""
    # Stragglers in production (fleetctl.jobs.stragglers, the ProductionStragglers workflow
    # a `fleetctl schedule create stragglers` starts): the Prometheus that scrapes the DCGM
    # exporters (http(s)://host:port[/prefix], no credentials in it; empty: not judged), the
    # bearer token sent to it (https only; never logged), the CA bundle its certificate is
    # verified against (empty: the system's), how long one query may take, and the label
    # that names a series' node (dcgm-exporter's `Hostname`).
    prometheus_url: str = ""
    prometheus_token: str = ""
    prometheus_ca_path: str = ""
    prometheus_timeout_s: float = 10.0
    prometheus_node_label: str = "Hostname"
    # Each node's slowest GPU averaged over this window, compared with the job's other nodes:
    # a straggler beyond this robust z (Iglewicz and Hoaglin's 3.5), in jobs of at least
    # this many nodes (fewer cannot tell a slow node from a spread); judged this often.
    straggler_window_s: float = 300.0
    straggler_threshold: float = 3.5
    straggler_min_nodes: int = 5
    straggler_interval_s: float = 60.0
    # flag-only records findings; drain-at-checkpoint also drains a straggler through the
    # capacity guard once its job has checkpointed (or restarted, or ended) since the finding.
    straggler_policy: str = "flag-only"
    # Hung jobs (fleetctl.jobs.hang, the HungJobs workflow a `fleetctl schedule create
    # hung-jobs` starts): a running job late on its checkpoint by more than this many of its
    # own cadences, with every GPU idle (a node's busiest GPU at most hang_idle_pct %,
    # averaged over hang_window_s) or an NCCL watchdog timeout on a node; judged this often
    # (at most half a cadence, to flag a hang within two). flag-only records; restart-off-node
    # also drains the node it hung on through the capacity guard and restarts the job off it.
    hang_policy: str = "flag-only"
    hang_cadence_factor: float = 1.5
    hang_idle_pct: float = 5.0
    hang_window_s: float = 120.0
    hang_interval_s: float = 60.0
    # Another tool's drain of a production node in its scheduler (NHC, a person): each worker
    # looks every external_drain_watch_s (0: never) and records each as a health event of the
    # node; policy record-only leaves the node in production, maintenance asks the capacity
    # guard to take it there (fleetctl.nodes.scheduler_sync). A look is one read of each
    # scheduler that reads many nodes at once (Slurm: one sinfo), so it can be as often as
    # the stall watch's; an operator sees such a drain within half a minute, not five.
    external_drain_watch_s: float = 30.0
    external_drain_policy: str = "record-only"
    # Retention (fleetctl.db.retention, `fleetctl db prune`): check runs' raw output is kept
    # this many days, their verdicts longer, health events longer still (what a figure or a
    # decision reads is kept whatever its age); each worker prunes every retention_interval_s
    # (0: never; `db prune` by hand or from cron then).
    retention_raw_output_days: float = 14.0
    retention_check_days: float = 180.0
    retention_health_event_days: float = 400.0
    retention_interval_s: float = 86400.0
    # The front door's audit trail is kept as long as health events by default.
    retention_audit_days: float = 400.0
    # Set, every write command goes to the front door at this https URL (fleetctl.authz), proven
    # by the client certificate and key or by the OIDC token in api_token_file; reads stay local.
    api_url: str = ""
    api_ca_path: str = ""
    api_cert_path: str = ""
    api_key_path: str = ""
    api_token_file: str = ""
    # Set only by the front door for the command it runs: the authenticated subject (or its
    # `--as` narrowing, subject/WHY), recorded verbatim as the actor of every change.
    api_actor: str = ""
    sources: dict[str, str] = field(default_factory=dict, repr=False, compare=False)

    def identity(self) -> str:
        """Who is acting and from where, recorded on every state change: the configured
        operator (`name@where`; a bare name gets this host) or the authenticated user@host."""
        if self.api_actor:
            return self.api_actor
        host = socket.gethostname()
        if self.operator:
            return self.operator if "@" in self.operator else f"{self.operator}@{host}"
        return f"{authenticated_user()}@{host}"


GUARD_SETTINGS = (
    "guard_max_unavailable_fleet",
    "guard_max_unavailable_rack",
    "guard_storm_fraction",
    "guard_storm_window_s",
)


def guard_policy(settings: Settings, fleet: str) -> GuardPolicy:
    """The capacity guard's policy for `fleet`: the guard_* settings, overridden by the fleet's
    entry in guard_fleets, and the automation dry run."""
    from fleetctl.nodes.capacity import GuardPolicy

    limits = {name: getattr(settings, name) for name in GUARD_SETTINGS} | settings.guard_fleets.get(fleet, {})
    return GuardPolicy(
        max_unavailable_fleet=limits["guard_max_unavailable_fleet"],
        max_unavailable_rack=limits["guard_max_unavailable_rack"],
        storm_fraction=limits["guard_storm_fraction"],
        storm_window_s=limits["guard_storm_window_s"],
        dry_run=settings.automation_dry_run,
    )


def xid_policy(settings: Settings) -> XidPolicy:
    """The site's Xid policy the xid_policy setting names (the catalog alone when unset);
    XidPolicyError, one line, for a file that is missing or does not validate."""
    from fleetctl.checks.xid_policy import load_xid_policy

    return load_xid_policy(settings.xid_policy or None)


def authenticated_user() -> str:
    """The identity the system vouches for: the OS account this process runs as (looked up by
    uid; $USER and $LOGNAME are self-declared). Where fleetctl is reached through an mTLS
    front end, this is where the client certificate's subject belongs."""
    import pwd

    try:
        return pwd.getpwuid(os.getuid()).pw_name
    except KeyError:  # a uid without a passwd entry (containers): the number is still true
        return f"uid{os.getuid()}"


# An operator is `name` or `name@where`. Automation acts as `runbook:NAME`, `firmware:...`,
# `schedule/ID`, `sweep/ID`, `lifecycle`...: a name holds no ':' or '/', and a bare name
# becomes name@host, so no operator can be recorded as automation. Either may end in `/WHY`
# (a ticket, a change): through the front door `--as` may only narrow the authenticated
# subject that way (fleetctl.authz.decide); run here, `name/WHY` still becomes name/WHY@host.
_OPERATOR = re.compile(
    r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}(@[A-Za-z0-9\[][A-Za-z0-9._:\[\]-]{0,127})?(/[A-Za-z0-9][A-Za-z0-9._-]{0,63})?\Z"
)


def check_operator(value: str) -> str:
    if not _OPERATOR.match(value):
        raise ConfigError(
            f"operator {value[:40]!r} must be name or name@host, optionally /WHY (letters, digits, '.', '_', '-'; "
            "':' is reserved for automation; at most 64+128+64 characters)"
        )
    from fleetctl.authz.roles import automation_actor

    # `NAME/WHY` narrows a person's name; an automation actor's (`schedule/nightly`) is not one.
    if "/" in value and automation_actor(value):
        raise ConfigError(f"operator {value[:40]!r} is a name automation records its acts under")
    return value


_TRUE = ("1", "true", "yes", "on")
_FALSE = ("0", "false", "no", "off")

# Every number a setting can hold, bounded: (lowest, highest, whether the lowest is allowed).
# A guard fraction of 0 or NaN would refuse or hang every automated drain, a window <= 0
# disables the storm breaker.
_BOUNDS: dict[str, tuple[float, float, bool]] = {
    "guard_max_unavailable_fleet": (0.0, 1.0, False),
    "guard_max_unavailable_rack": (0.0, 1.0, False),
    "guard_storm_fraction": (0.0, 1.0, False),
    "guard_storm_window_s": (0.0, 7 * 86400.0, False),
    "sim_time_scale": (0.0, 1000.0, True),
    # Neither lane may be left without a slot (workflows.worker.slots_of).
    "bulk_slot_share": (0.0, 0.9, False),
    "worker_bulk_nice": (0, 19, True),
    "worker_gc_young": (700, 1_000_000, True),
    "bulk_activities_per_s": (0.0, 100_000.0, True),
    "sim_seed": (0, 2**63 - 1, True),
    "lemon_threshold": (1, 1000, True),
    "lemon_window_days": (0.0, 3650.0, False),
    "suspect_after_unreachable": (1, 1000, True),
    "agent_silence_s": (0.0, 30 * 86400.0, True),
    "agent_sample_confirmations": (1, 10, True),
    "agent_sample_grace_s": (0.0, 3600.0, True),
    "agent_watch_flap_window_s": (10.0, 86400.0, True),
    "agent_watch_flaps": (2, 1000, True),
    "agent_watch_errors_per_hour": (1.0, 1e9, True),
    "agent_watch_stuck_s": (10.0, 86400.0, True),
    "stall_after_s": (1.0, 86400.0, True),
    "stall_watch_s": (1.0, 3600.0, True),
    "restart_island_wait_s": (0.0, 3600.0, False),
    "prometheus_timeout_s": (0.0, 120.0, False),
    # A window shorter than two scrapes holds one sample or none; a day is a job's lifetime.
    "straggler_window_s": (2.0, 86400.0, True),
    "straggler_threshold": (0.0, 100.0, False),
    "straggler_min_nodes": (3, 100000, True),
    "straggler_interval_s": (1.0, 86400.0, True),
    # Under one cadence late is on time; over two is no longer "within twice its cadence".
    "hang_cadence_factor": (1.0, 2.0, True),
    "hang_idle_pct": (0.0, 100.0, True),
    "hang_window_s": (2.0, 86400.0, True),
    "hang_interval_s": (1.0, 86400.0, True),
    "spares_per_island": (0, MAX_SPARES_PER_ISLAND, True),
    "external_drain_watch_s": (0.0, 86400.0, True),
    "retention_raw_output_days": (0.0, 36500.0, False),
    "retention_check_days": (0.0, 36500.0, False),
    "retention_health_event_days": (0.0, 36500.0, False),
    "retention_interval_s": (0.0, 30 * 86400.0, True),
    "retention_audit_days": (0.0, 36500.0, False),
}


# Booleans: a variable set empty is refused, not taken as unset.
_SAID_OR_UNSET = frozenset({f.name for f in fields(Settings) if f.type == "bool"} | {"temporal_tls"})


def parse_bool(raw: Any, what: str = "value") -> bool:
    """The one boolean parser: 1/true/yes/on or 0/false/no/off (any case); anything else is an
    error, never quietly false (that turned TLS verification off for `enabled`)."""
    if isinstance(raw, bool):
        return raw
    text = str(raw).lower()
    if text in _TRUE:
        return True
    if text in _FALSE:
        return False
    raise ConfigError(f"{what}: {str(raw)[:40]!r} is not a boolean (use {'/'.join(_TRUE)} or {'/'.join(_FALSE)})")


def _coerce(name: str, raw: Any) -> Any:
    kind = {f.name: f.type for f in fields(Settings)}[name]
    what = f"setting {name}"
    if name == "guard_fleets":
        return _guard_fleets(raw, what)
    if kind == "bool":
        return parse_bool(raw, what)
    if name == "temporal_tls":  # said true or false (a flag's bool, a YAML bool, a word), or not said
        return ("true" if parse_bool(raw, what) else "false") if raw != "" else ""
    if isinstance(raw, (bool, list, dict)) or raw is None:
        raise ConfigError(
            f"{what}: expected a {'number' if kind in ('int', 'float') else 'string'}, not {type(raw).__name__}"
        )
    if kind == "str":
        return _check_string(name, str(raw), what)
    try:
        value: float = float(raw) if kind == "float" else int(str(raw))
    except (TypeError, ValueError):
        raise ConfigError(f"{what}: {str(raw)[:40]!r} is not a valid {kind}") from None
    low, high, low_allowed = _BOUNDS.get(name, (-math.inf, math.inf, True))
    if not math.isfinite(value) or value > high or value < low or (value == low and not low_allowed):
        interval = f"{'[' if low_allowed else '('}{low:g}, {high:g}]"
        raise ConfigError(f"{what}: {str(raw)[:40]!r} is out of range (must be in {interval})")
    return value


def _check_string(name: str, value: str, what: str) -> str:
    if name == "operator":
        return check_operator(value)
    if name == "api_actor" and value:
        from fleetctl.authz.decide import valid_actor

        if not valid_actor(value):
            raise ConfigError(f"{what}: {value[:40]!r} is not a subject or subject/WHY")
    if name == "straggler_policy":
        from fleetctl.jobs.stragglers import POLICIES

        if value not in POLICIES:
            raise ConfigError(f"{what}: {value[:40]!r} is not a policy (one of {', '.join(POLICIES)})")
    if name == "hang_policy":
        from fleetctl.jobs.hang import HangPolicy

        if value not in {p.value for p in HangPolicy}:
            raise ConfigError(
                f"{what}: {value[:40]!r} is not a policy (one of {', '.join(p.value for p in HangPolicy)})"
            )
    if name == "prometheus_node_label":
        from fleetctl.jobs.stragglers import check_label

        try:
            check_label(value)
        except ValueError as exc:
            raise ConfigError(f"{what}: {exc}") from None
    if name == "worker_lanes" and value not in WORKER_LANES:
        raise ConfigError(f"{what}: {value[:40]!r} is not a lane choice (one of {', '.join(WORKER_LANES)})")
    if name == "external_drain_policy":
        from fleetctl.nodes.scheduler_sync import EXTERNAL_DRAIN_POLICIES

        if value not in EXTERNAL_DRAIN_POLICIES:
            raise ConfigError(f"{what}: {value[:40]!r} is not a policy (one of {', '.join(EXTERNAL_DRAIN_POLICIES)})")
    if name == "ssh_jump_host" and value:
        from fleetctl.inventory.parse import JUMP_HOST_RE

        if not JUMP_HOST_RE.match(value):
            raise ConfigError(f"{what}: {value[:60]!r} must be [user@]host[:port]")
    if name == "prometheus_url" and value:
        _check_prometheus_url(value, what)
    return value


def _check_prometheus_url(value: str, what: str) -> None:
    """http(s)://host[:port][/prefix]: no credentials in it (a URL is printed and logged;
    the token is its own setting), no query or fragment."""
    from urllib.parse import urlsplit

    try:
        url = urlsplit(value)
        url.port  # noqa: B018 - raises on a bad port
    except ValueError as exc:
        raise ConfigError(f"{what}: not a URL ({exc})") from None
    if url.scheme not in ("http", "https") or not url.hostname:
        raise ConfigError(f"{what}: {value[:60]!r} must be http(s)://host[:port][/path]")
    if url.username is not None or url.password is not None:
        raise ConfigError(f"{what}: credentials do not belong in the URL (set prometheus_token)")
    if url.query or url.fragment or any(ord(c) < 33 for c in value):
        raise ConfigError(f"{what}: {value[:60]!r} must not carry a query, a fragment or spaces")


def _check_prometheus_token(settings: Settings) -> None:
    """A bearer token goes only to an https Prometheus: over http it would cross in clear."""
    if settings.prometheus_token and not settings.prometheus_url.startswith("https://"):
        raise ConfigError(
            f"setting prometheus_token: sent only to an https prometheus_url (not {settings.prometheus_url[:60]!r})"
        )


def _guard_fleets(raw: Any, what: str) -> dict[str, dict[str, float]]:
    """{fleet: {guard setting: value}}, each value bounded as its global setting is."""
    if not isinstance(raw, dict):
        raise ConfigError(f"{what}: expected a mapping of fleet names to guard settings")
    fleets: dict[str, dict[str, float]] = {}
    for fleet, limits in raw.items():
        if not isinstance(limits, dict):
            raise ConfigError(f"{what}: fleet {str(fleet)[:40]!r}: expected a mapping of guard settings")
        unknown = sorted(str(k)[:40] for k in limits if k not in GUARD_SETTINGS)
        if unknown:
            raise ConfigError(
                f"{what}: fleet {str(fleet)[:40]!r}: unknown setting {unknown[0]!r} "
                f"(one of {', '.join(GUARD_SETTINGS)})"
            )
        fleets[str(fleet)] = {key: _coerce(key, value) for key, value in limits.items()}
    return fleets


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
        from fleetctl.checks.safe_yaml import YamlRefused, load_file

        try:
            data = load_file(path) or {}
        except YamlRefused as exc:
            raise ConfigError(str(exc)) from None
        if not isinstance(data, dict):
            raise ConfigError(f"{path}: expected a mapping of settings")
        for key, value in data.items():
            if key not in settings.sources:
                raise ConfigError(f"{path}: unknown setting {str(key)[:40]!r}")
            try:
                setattr(settings, key, _coerce(key, value))
            except ConfigError as exc:
                raise ConfigError(f"{path}: {exc}") from None
            settings.sources[key] = f"file {path}"
    elif config_file:
        raise ConfigError(f"config file {path} does not exist")

    for key, var in ENV_VARS.items():
        if var in env and env[var] == "" and key in _SAID_OR_UNSET:
            # Unset means the default; an empty boolean is neither true nor false (the SDK
            # read an empty TEMPORAL_TLS as "on").
            raise ConfigError(f"env {var} is empty: set it to true or false, or unset it")
        if env.get(var):
            setattr(settings, key, _coerce(key, env[var]))
            settings.sources[key] = f"env {var}"

    for key, value in (flags or {}).items():
        if value is not None:
            setattr(settings, key, _coerce(key, value))
            settings.sources[key] = "flag"
    _check_kubernetes(settings)
    _check_prometheus_token(settings)
    _check_retention(settings)
    return settings


def _check_retention(settings: Settings) -> None:
    """A verdict outlives its raw output: pruning a check run would otherwise take output the
    setting says to keep."""
    if settings.retention_check_days < settings.retention_raw_output_days:
        raise ConfigError(
            f"setting retention_check_days: {settings.retention_check_days:g} is shorter than "
            f"retention_raw_output_days ({settings.retention_raw_output_days:g}): a check run's "
            "verdict is kept at least as long as its raw output"
        )


def _check_kubernetes(settings: Settings) -> None:
    """The Kubernetes drain settings, checked once here so a bad one stops at startup."""
    from fleetctl.schedulers.kubernetes_drain import kubernetes_options

    try:
        kubernetes_options(settings)
    except ValueError as exc:
        source = settings.sources.get(str(exc).partition(":")[0], "")
        raise ConfigError(f"setting {exc}" + (f" (from {source})" if source else "")) from None
