"""The capacity guard's decisions, as pure functions over a snapshot of the fleet.

Every automated removal of a node from production asks first. The guard says no when the
removal would take more of the fleet (or of one rack) out than is safe, and it stops all
automated removals when failures arrive as a storm: many nodes failing at once usually have
one shared cause (a switch, a driver roll-out, the checker itself), and draining them all
would turn a checker bug into an outage. A critical fault (the GPU is already gone) is
counted but never held back: refusing to drain a node that has lost its GPU protects nothing.

Which faults pass a full budget: the critical XIDs the kernel reports
(checks/catalog/xid.tsv: 48 double-bit ECC, 64 remap failure, 79 fallen off the bus, 95
uncontained memory error, ...), whatever the budget and the breaker. A check's verdict
(nvidia-smi's uncorrectable ECC count, a failed row remap) waits for the budget like any
drain, and shows as DrainHeld: a verdict can be the checker's mistake, a critical request
passes the storm breaker too, and eight such verdicts at once must not drain eight nodes
(tests/lifecycle/test_phases.py's checker storm). A GPU that has really lost memory also
logs its XID, which then drains the node at once.

NVLink domains (a GB200 NVL72 rack, the inventory's `nvlink_domain`): a fault of the domain's
fabric (IMEX down, an NVSwitch tray) takes every node of the domain out of multi-node NVLink
jobs at once, so it costs the guard the whole domain, not one node. The rule:
- a domain-fabric fault is one request for the domain (domain_removal): the node that found
  it plus every other in-service node of the domain (`domain_nodes`), granted or refused as
  one, within the fleet's limit (half a domain drained frees nothing: the rest cannot run an
  NVLink job either); the guard workflow hands out a grant per node (`domain_grants`);
- it is one failure to the storm breaker (one fault, one cause), not one per node;
- an ordinary GPU fault on a domain's node (an XID, a failed check) asks for that one node;
- a critical request is the node's own lost GPU: it passes the limits for that node only;
  when its fault is of the domain's fabric (a fatal NVSwitch SXid), the rest of the domain
  follows as a second request, within the limits (removals_for_fault);
- a node's own word acts on that node only: a health event that came with the node agent's
  credential (recorded under AGENT_SOURCE) holds the domain only when something else says the
  fabric failed too (domain_witnessed): another tray's report within DOMAIN_WITNESS_WINDOW_S,
  or a failed check of the domain's own IMEX state. Any root user on a tray can write the
  kernel line; one tray must not take its 17 neighbours out.
The guard counts nodes; a domain's nodes are one profile (the inventory refuses a mixed
domain), so its nodes are its GPUs over that profile's count per tray.

A GPU taken out alone (fleetctl.nodes.gpu_quarantine: its node stays in production) costs 1/N
of its node of N GPUs, in the fleet's and the rack's counts alike (RackCounts.gpus_out), and
asks the guard as any removal does: eight GPUs out one by one cost what one drain costs.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from fleetctl.nodes.lifecycle import NodeState


@dataclass
class GuardPolicy:
    max_unavailable_fleet: float = 0.10
    max_unavailable_rack: float = 0.25
    # The breaker opens when more than this fraction of production nodes fail within the window.
    storm_fraction: float = 0.20
    storm_window_s: float = 600.0
    # A storm needs at least this many failures, so one bad node in a small fleet is a bad
    # node, not a storm.
    storm_min_failures: int = 3
    # Automation dry run: every decision is made and recorded, none granted.
    dry_run: bool = False


@dataclass
class RackCounts:
    serving: int = 0  # nodes of the rack in the serving fleet (NodeState.in_serving_fleet)
    unavailable: int = 0  # of which out of service (NodeState.out_of_service)
    production: int = 0
    # Nodes' worth of GPUs out of their schedulers on nodes still in service (1/N per GPU).
    gpus_out: float = 0.0


@dataclass
class FleetSnapshot:
    racks: dict[str, RackCounts] = field(default_factory=dict)
    # Production nodes another tool (a person in Slurm, NHC) drained in their scheduler, each
    # with its drain's health event id: counted out of service in `racks` (counted_outside).
    drained_outside: dict[str, str] = field(default_factory=dict)
    # The GPUs counted in `racks`' gpus_out, each gpu_grant_key(node, gpu): a pending GPU grant
    # ends once its GPU is here.
    gpus_quarantined: list[str] = field(default_factory=list)

    @property
    def serving(self) -> int:
        return sum(r.serving for r in self.racks.values())

    @property
    def unavailable(self) -> int:
        return sum(r.unavailable for r in self.racks.values())

    @property
    def production(self) -> int:
        return sum(r.production for r in self.racks.values())

    @property
    def gpus_out(self) -> float:
        return sum(r.gpus_out for r in self.racks.values())


@dataclass
class RemovalRequest:
    node: str
    rack: str
    reason: str
    actor: str
    critical: bool = False  # the node has already lost its GPU (XID 79, uncorrectable ECC...)
    force: bool = False  # an operator's override, recorded
    request_id: str = ""
    # A domain-fabric fault: the NVLink domain, and its other in-service nodes that go out
    # with `node` (domain_removal). Empty: this one node.
    domain: str = ""
    domain_nodes: list[str] = field(default_factory=list)
    # A GPU taken out alone (fleetctl.nodes.gpu_quarantine.gpu_key), the node left in service,
    # and the node's GPU count: it costs 1/gpus_on_node of the node (removal_cost). "": the node.
    gpu: str = ""
    gpus_on_node: int = 0


@dataclass
class RemovalDecision:
    node: str
    granted: bool
    reason: str
    # Set when this request is the one that opened the breaker.
    breaker_opened: bool = False
    # A granted removal's grant (grant_for): the node's workflow drains for automation only
    # with one that names it at its current state version.
    grant: str = ""
    # The decision would have been this one, but automation runs dry (GuardPolicy.dry_run).
    dry_run: bool = False
    # A granted domain request: the domain's other nodes the grant takes out with `node`, and
    # (set by the guard workflow) each one's own grant, for its drain.
    domain_nodes: list[str] = field(default_factory=list)
    domain_grants: dict[str, str] = field(default_factory=dict)


@dataclass
class CheckErrorReport:
    """A sweep's nodes whose checks ended as `error` (nothing judged), out of those it checked."""

    errored: list[str]
    checked: int
    actor: str
    key: str  # stable per sweep run, so a retried report is recorded once
    # What `errored` are: nodes whose checks could not judge them (CHECK_ERRORS), or, of the
    # `checked` nodes that have an agent, those whose agent fell silent (AGENT_SILENCE).
    kind: str = "check-errors"
    # How many errored when `errored` names only some of them (0: it names them all).
    count: int = 0


CHECK_ERRORS, AGENT_SILENCE = "check-errors", "agent-silence"
# How the breaker's reason names each kind of storm: (the storm, what the nodes did, of what).
_STORM_WORDS = {
    CHECK_ERRORS: ("checker storm", "returned unjudgeable output", "of the nodes checked"),
    AGENT_SILENCE: ("agent silence storm", "have an agent fallen silent", "of the nodes with an agent"),
}


def grant_for(guard: str, node: str, state_version: int) -> str:
    """The grant the guard `guard` hands out for taking `node` out at `state_version`."""
    return f"{guard}:{node}@{state_version}"


def gpu_grant_key(node: str, gpu: str) -> str:
    """What the guard keeps a GPU's pending grant under, and the snapshot names the GPU by."""
    return f"{node}/gpu/{gpu}"


def grant_covers(grant: str, node: str, state_version: int) -> bool:
    """Whether `grant` allows `node`, now at `state_version`, to be drained by automation: a
    grant names one node at one version, so one for another node, or from before the node
    last moved, drains nothing."""
    guard, _, rest = grant.rpartition(":")
    return bool(guard) and rest == f"{node}@{state_version}"


# The inventory label that puts a node in one fleet (several fleets can share a database and
# a Temporal namespace, each with its own guard and sweeps). A node without it is in the
# fleet of whoever manages the database: every fleet's count.
FLEET_LABEL = "fleet"


def in_fleet(labels: Mapping[str, Any], fleet: str) -> bool:
    return str(labels.get(FLEET_LABEL, fleet)) == fleet


@dataclass(frozen=True)
class Budget:
    """How much of the fleet (scope "fleet") or of one rack ("rack <name>") is out of service,
    against the most the guard lets automation take out."""

    scope: str
    serving: int
    unavailable: float  # nodes, and the GPUs out alone at 1/N of theirs (whole when none is)
    limit: int
    max_fraction: float

    @property
    def headroom(self) -> float:
        """Nodes automation may still take out; negative when an operator went past the limit."""
        return self.limit - self.unavailable

    def to_dict(self) -> dict[str, Any]:
        return {
            "scope": self.scope,
            "serving": self.serving,
            "unavailable": self.unavailable,
            "limit": self.limit,
            "headroom": self.headroom,
            "max_fraction": self.max_fraction,
        }


def budgets(policy: GuardPolicy, snapshot: FleetSnapshot) -> list[Budget]:
    """The fleet's budget, then each rack's by name: what `fleet status` shows."""
    fleet = Budget(
        "fleet",
        snapshot.serving,
        _out(snapshot.unavailable, snapshot.gpus_out),
        allowed_unavailable(snapshot.serving, policy.max_unavailable_fleet),
        policy.max_unavailable_fleet,
    )
    return [
        fleet,
        *(
            Budget(
                f"rack {name or '-'}",
                r.serving,
                _out(r.unavailable, r.gpus_out),
                allowed_unavailable(r.serving, policy.max_unavailable_rack),
                policy.max_unavailable_rack,
            )
            for name, r in sorted(snapshot.racks.items())
        ),
    ]


def _out(nodes: int, gpus: float) -> float:
    """Nodes out, with the GPUs out alone as the guard counts them; a whole count when none is."""
    return nodes + gpus if gpus else nodes


def operator_drain_overruns(policy: GuardPolicy, snapshot: FleetSnapshot, drains: list[tuple[str, str]]) -> list[str]:
    """What an operator's drain of `drains` ((rack, state) per node) would take past the
    limits automation keeps to, one line per fleet or rack; empty when within them. Only
    nodes in production count: a drain of any other is refused, and takes nothing out.
    Operators may go past the limits (they know of a maintenance window the guard does
    not); the CLI says so and asks first."""
    taken: dict[str, int] = {}
    for rack, state in drains:
        if NodeState(state).in_service:
            taken[rack] = taken.get(rack, 0) + 1
    if not taken:
        return []
    over = []
    for b in budgets(policy, snapshot):
        adds = sum(taken.values()) if b.scope == "fleet" else taken.get(b.scope.removeprefix("rack "), 0)
        after = b.unavailable + adds
        if adds and after > b.limit:
            over.append(
                f"{b.scope}: {after} of {b.serving} nodes out after this drain, past the automation limit of "
                f"{b.limit} ({b.max_fraction:.0%})"
            )
    return over


@dataclass(frozen=True)
class StormLimit:
    """How many nodes failing within the storm window make a storm (`limit`): more than the
    storm fraction of `of` nodes, and at least the policy's minimum. The one figure the
    breaker, the RMA hold and every message that names a storm use (storm_limit)."""

    limit: int
    of: int
    fraction: float
    least: int

    def reached(self, failing: int) -> bool:
        return failing >= self.limit

    def words(self, of_what: str = "production nodes") -> str:
        """`the storm limit is 10 (more than 20% of 47 production nodes, at least 3)`."""
        return (
            f"the storm limit is {self.limit} (more than {self.fraction:.0%} of {self.of} {of_what}, "
            f"at least {self.least})"
        )


def storm_limit(policy: GuardPolicy, of: int) -> StormLimit:
    """The storm limit over `of` nodes: the least whole count above the fraction, at least the minimum."""
    return StormLimit(
        max(policy.storm_min_failures, math.floor(of * policy.storm_fraction) + 1),
        of,
        policy.storm_fraction,
        policy.storm_min_failures,
    )


def allowed_unavailable(total: int, fraction: float) -> int:
    """At least one node may always be out, or a small fleet could never be repaired."""
    return max(1, math.floor(total * fraction)) if total else 0


# What is a fault of an NVLink domain's shared fabric rather than of the node that saw it: a
# failed `imex` check (nvidia-imex-ctl -N: the domain not UP, a daemon not READY, a pair not
# connected: multi-node NVLink memory sharing fails for every tray of the domain), and the
# NVSwitch signatures of checks/catalog/signatures.tsv that stop the switch trays' traffic.
DOMAIN_FABRIC_CHECKS = frozenset({"imex"})
DOMAIN_FABRIC_SIGNATURES = frozenset({"nvswitch_sxid_fatal", "fabric_manager_topology_mismatch"})


def is_domain_fabric_fault(check: str = "", signature: str = "") -> bool:
    """Whether a failed check of kind `check`, or a health event of catalog signature
    `signature`, is a fault of the node's NVLink domain's fabric (see DOMAIN_FABRIC_CHECKS)."""
    return check in DOMAIN_FABRIC_CHECKS or signature in DOMAIN_FABRIC_SIGNATURES


# The source the intake records an event under when it came with a node agent's credential
# (fleetctl.intake.server; the operator token's events are recorded as what sent them, never
# under this name), and the agent's own when it signals the node's workflow itself: the
# node's word about itself.
AGENT_SOURCE = "agent"
# How long after one tray's report of its domain's fabric another's still says the same: every
# tray of a domain logs the fabric's fault within seconds of the others.
DOMAIN_WITNESS_WINDOW_S = 600.0


def domain_witnessed(source: str, finder: str, reporters: Iterable[str], domain_check_failed: bool) -> bool:
    """Whether a health event recorded from `source` on `finder`, of a fault of its NVLink
    domain's fabric, may hold the domain: the operator's word (any source but AGENT_SOURCE),
    or the node's own corroborated by another of the domain's nodes (`reporters`: those that
    reported such a fault within DOMAIN_WITNESS_WINDOW_S) or by the domain's own IMEX state (a
    failed imex check of one of its trays in that window)."""
    return source != AGENT_SOURCE or domain_check_failed or any(node != finder for node in reporters)


def removals_for_fault(
    request: RemovalRequest,
    domain: str,
    members: Iterable[tuple[str, str]],
    check: str = "",
    signature: str = "",
    witnessed: bool = True,
) -> list[RemovalRequest]:
    """The requests a fault on `request.node` makes, asked in order (members: (name, state) of
    the nodes of its NVLink domain `domain`; `witnessed`: domain_witnessed, for a health event):
    - an ordinary GPU fault, or a node in no domain: the node alone, unchanged;
    - a fault of the domain's fabric only the node's own agent says it saw: the node alone;
    - a fault of the domain's fabric: the whole domain as one request (domain_removal);
    - the same fault said to be critical (a fatal NVSwitch SXid): the node alone, past the
      limits (its GPUs are lost), then the rest of the domain as one request within them
      (their GPUs work, but not together), if any of it is still in service;
    - none, when the node is already out of service: another node's request for the same
      fault held the domain with it (every tray of a domain sees its IMEX fault)."""
    if not (domain and is_domain_fabric_fault(check, signature)):
        return [request]
    members = list(members)
    if any(name == request.node and not NodeState(state).in_service for name, state in members):
        return []
    if not witnessed:
        return [request]
    if not request.critical:
        return [domain_removal(request, domain, members)]
    others = sorted(name for name, state in members if name != request.node and NodeState(state).in_service)
    if not others:
        return [request]
    rest = RemovalRequest(
        others[0],
        request.rack,
        domain_held_reason(domain, request.node, request.reason),
        request.actor,
        request_id=f"{request.request_id}/domain",
    )
    return [request, domain_removal(rest, domain, [(name, state) for name, state in members if name != request.node])]


def domain_held_reason(domain: str, finder: str, cause: str) -> str:
    """Why a node of `domain` goes out with the node `finder` that found its fabric's fault."""
    return f"NVLink domain {domain} held: its fabric failed on {finder}: {cause}"


def domain_removal(request: RemovalRequest, domain: str, members: Iterable[tuple[str, str]]) -> RemovalRequest:
    """The one request a domain-fabric fault found on `request.node` makes for its NVLink domain:
    `members` are the domain's nodes as (name, state); those in service other than the node go
    with it (one already out costs nothing more). Never critical: the domain's other GPUs still
    work, only not together."""
    others = sorted(name for name, state in members if name != request.node and NodeState(state).in_service)
    return RemovalRequest(
        request.node,
        request.rack,
        request.reason,
        request.actor,
        critical=False,
        force=request.force,
        request_id=request.request_id,
        domain=domain,
        domain_nodes=others,
    )


def in_service_domain(request: RemovalRequest, in_service: Iterable[str]) -> RemovalRequest:
    """The domain request with only those of its other nodes still in service (the guard reads
    them again, before the fleet's counts: one that left since the request was made is counted
    there, and must not cost the domain a second time)."""
    still = set(in_service)
    return dataclasses.replace(request, domain_nodes=[n for n in request.domain_nodes if n in still])


# The source of the health events another tool's drain becomes (fleetctl.nodes.scheduler_sync),
# and the actor of the drain the external-drain watch asks for it.
EXTERNAL_DRAIN = "external-drain"
# Why the guard grants a drain of a node another tool already drained: whatever asks (the
# external-drain watch under its `maintenance` policy, a check that failed on it), the node
# serves nothing now and is counted out already, so the drain takes nothing more; a drain
# outside fleetctl is no failure fleetctl found, and never counts toward the storm breaker
# (a misfiring NHC must not pause fleetctl's automation), nor waits for it.
ALREADY_OUT = "already out of service: drained outside fleetctl, counted unavailable; this drain takes nothing more"


def already_out(request: RemovalRequest, snapshot: FleetSnapshot) -> bool:
    """Whether `request` is for a node drained outside fleetctl (snapshot.drained_outside)."""
    return not request.domain_nodes and request.node in snapshot.drained_outside


def counts_as_failure(request: RemovalRequest, snapshot: FleetSnapshot) -> bool:
    """Whether the storm breaker counts `request` (under failure_key): an operator's forced
    drain is the operator's, and a node drained outside fleetctl (already_out) is no failure."""
    return not (request.force or already_out(request, snapshot))


def counted_outside(state: str, drained_outside: bool) -> str:
    """The state the guard counts a node in when another tool may have drained it: a node in
    production that its scheduler has drained outside fleetctl serves nothing, and is counted
    out of service (as in maintenance) until that drain is lifted."""
    if drained_outside and NodeState(state).in_service:
        return NodeState.MAINTENANCE.value
    return state


def failure_key(request: RemovalRequest) -> str:
    """What the storm breaker counts a request's failure as: its node, or, for a fault of an
    NVLink domain's fabric, the domain (every tray of a domain reports its one IMEX fault).
    A GPU's fault is its node's: a node's GPUs failing one by one are one failing node."""
    return request.domain or request.node


def removal_cost(request: RemovalRequest) -> float:
    """Nodes the request takes out of service: one, its whole domain's in-service nodes, or,
    for one GPU, that GPU's share of its node (1/N of a node of N GPUs)."""
    if request.gpu:
        return 1.0 / max(1, request.gpus_on_node)
    return 1 + len(request.domain_nodes)


def _nodes(count: float) -> str:
    """A count of nodes as the guard's reasons say it: whole, or with the GPUs' fraction."""
    return f"{count:.3g}" if count != int(count) else str(int(count))


def judged_critical(request: RemovalRequest, evidence: str) -> RemovalRequest:
    """A removal said to be critical, as the guard judges it: only a recorded health event
    (`evidence`, what the guard read of it; empty when none is recorded) makes it so, past the
    limits; a claim without one is judged as an ordinary removal, and its reason says why."""
    if evidence:
        return dataclasses.replace(request, reason=f"{request.reason} ({evidence})")
    return dataclasses.replace(
        request,
        critical=False,
        reason=f"{request.reason} (said to be critical; no critical health event is recorded)",
    )


def reads_snapshot(request: RemovalRequest) -> bool:
    """Whether decide() reads the fleet's counts for `request`: a forced or a critical removal
    is granted (or, in a dry run, would be) whatever they say, so a guard need not take them."""
    return not (request.force or request.critical)


def decide(
    policy: GuardPolicy,
    snapshot: FleetSnapshot,
    request: RemovalRequest,
    recent_failures: dict[str, float],
    now: float,
    breaker_open: bool,
    pending_grants: float = 0,
    pending_in_rack: float = 0,
) -> RemovalDecision:
    """Whether `request` may take its node out of production (see _decide). In a dry run
    (policy.dry_run) automation is told what the answer would have been and granted nothing;
    an operator's forced removal is the operator's act and is not dry."""
    decision = _decide(policy, snapshot, request, recent_failures, now, breaker_open, pending_grants, pending_in_rack)
    if policy.dry_run and decision.granted and not request.force:
        return RemovalDecision(request.node, False, f"dry run: would grant ({decision.reason})", dry_run=True)
    return decision


def _decide(
    policy: GuardPolicy,
    snapshot: FleetSnapshot,
    request: RemovalRequest,
    recent_failures: dict[str, float],
    now: float,
    breaker_open: bool,
    pending_grants: float = 0,
    pending_in_rack: float = 0,
) -> RemovalDecision:
    """Whether `request` may take its node (and, for a domain request, its domain's other
    nodes) out of production.

    `recent_failures` maps each node that reported a failure (or NVLink domain: failure_key)
    to its latest report's time: a storm is many nodes failing, not one node failing again and
    again;
    `pending_grants` are removals granted but not yet visible in the snapshot, in nodes (a
    GPU's grant is its share of its node).
    """
    with_domain = list(request.domain_nodes)
    if request.force:
        return RemovalDecision(request.node, True, f"forced by {request.actor}", domain_nodes=with_domain)
    if request.critical:
        return RemovalDecision(
            request.node,
            True,
            f"critical fault: the {'GPU' if request.gpu else 'node'} has already lost capacity"
            + _of_gpu(request)
            + (f"; the rest of NVLink domain {request.domain} is not taken with it" if with_domain else ""),
        )
    if already_out(request, snapshot):
        return RemovalDecision(request.node, True, ALREADY_OUT)
    if breaker_open:
        return RemovalDecision(request.node, False, f"automation paused: the circuit breaker is open; {UNTIL_RESUMED}")
    window_start = now - policy.storm_window_s
    failing = {key for key, t in recent_failures.items() if t >= window_start} | {failure_key(request)}
    failures_in_window = len(failing)
    storm = storm_limit(policy, snapshot.production)
    if storm.reached(failures_in_window):
        return RemovalDecision(
            request.node,
            False,
            f"storm: {failures_in_window} nodes failing in {policy.storm_window_s / 60:.0f} min; {storm.words()}; "
            f"breaker opened; {UNTIL_RESUMED}",
            breaker_opened=True,
        )
    takes = removal_cost(request)
    # A domain request is granted whole or refused whole: its refusal says what the domain costs.
    of_domain = f" (NVLink domain {request.domain}: {takes} nodes)" if with_domain else ""
    fleet_limit = allowed_unavailable(snapshot.serving, policy.max_unavailable_fleet)
    fleet_out = snapshot.unavailable + snapshot.gpus_out + pending_grants
    if fleet_out + takes > fleet_limit + _SLACK:
        return RemovalDecision(
            request.node,
            False,
            f"fleet limit: {_nodes(fleet_out)} of {snapshot.serving} already unavailable "
            f"(max {fleet_limit}, {policy.max_unavailable_fleet:.0%}){of_domain}{_of_gpu(request)}; "
            + until_back(math.ceil(fleet_out + takes - fleet_limit - _SLACK), "of the fleet"),
        )
    if with_domain:
        # The rack limit keeps a shared cause in one rack from taking much of it out; a domain
        # fault is that cause, which has already taken the domain's racks out of NVLink jobs, and an
        # NVL72 rack (18 trays, 4 of which its 25% lets out) could never be drained through it.
        return RemovalDecision(request.node, True, "within the fleet limit" + of_domain, domain_nodes=with_domain)
    rack = snapshot.racks.get(request.rack, RackCounts())
    rack_limit = allowed_unavailable(rack.serving, policy.max_unavailable_rack)
    rack_out = rack.unavailable + rack.gpus_out + pending_in_rack
    if rack_out + takes > rack_limit + _SLACK:
        return RemovalDecision(
            request.node,
            False,
            f"rack limit: {_nodes(rack_out)} of {rack.serving} in {request.rack or 'the rack'} "
            f"already unavailable (max {rack_limit}, {policy.max_unavailable_rack:.0%}){_of_gpu(request)}; "
            + until_back(math.ceil(rack_out + takes - rack_limit - _SLACK), f"of {request.rack or 'the rack'}"),
        )
    return RemovalDecision(request.node, True, "within limits" + _of_gpu(request))


# Sums of GPU shares (1/8 eight times) are not exact in floating point: a limit is passed only
# by more than this, far below one GPU of the largest node.
_SLACK = 1e-9


def _of_gpu(request: RemovalRequest) -> str:
    """What a GPU's request costs, said with its decision."""
    if not request.gpu:
        return ""
    return f" (GPU {request.gpu}: 1/{request.gpus_on_node} of {request.node})"


# What a held drain waits for, said with the refusal (the guard holds no timer: a drain is
# asked again by the next sweep or fault that finds the node, and granted once this is true).
UNTIL_RESUMED = "held until an operator resumes automation (fleet resume-automation)"


def until_back(nodes: int, where: str) -> str:
    """A limit's refusal: how many nodes must return to service before the drain can go.
    A limit of 0 (a rack too small for any to be out) never frees: said so."""
    if nodes <= 0:
        return "can go at the next ask"
    return (
        f"can go once {nodes} node{'s' if nodes != 1 else ''} {where} {'is' if nodes == 1 else 'are'} back in service"
    )


def checker_storm(policy: GuardPolicy, errored: int, checked: int, kind: str = CHECK_ERRORS) -> str | None:
    """Why the breaker opens when a sweep could not judge many of the nodes it checked, or None.

    An `error` never drains a node (it says nothing about the hardware), but errors on more
    than the storm fraction of the nodes checked at once point at one shared cause: a tool
    upgrade that changed the output, a broken check, the network to the nodes. Automation
    pauses until an operator has looked, because the same checker also judges failures.
    Many agents falling silent at once (AGENT_SILENCE) is the same: the intake, or the
    network between it and the nodes, not many nodes.
    """
    limit = storm_limit(policy, checked)
    if checked <= 0 or not limit.reached(errored):
        return None
    storm, did, of = _STORM_WORDS.get(kind, _STORM_WORDS[CHECK_ERRORS])
    return f"{storm}: {errored} of {checked} nodes {did}; {limit.words(of.removeprefix('of the '))}; breaker opened"


def counted_state(state: str, state_since: datetime, now: datetime, policy: GuardPolicy) -> str:
    """The state the guard counts a node in. A node sent to RMA within the storm window is
    still out for repair: a storm whose failures go straight to RMA (row-remap failures, a
    wrong result) would otherwise free its own budget as each node reached RMA, and drain
    the fleet two at a time until the breaker caught up."""
    if NodeState(state) is NodeState.RMA and (now - state_since).total_seconds() < policy.storm_window_s:
        return NodeState.MAINTENANCE.value
    return state


def guard_snapshot(nodes: Iterable[tuple[str, str, datetime]], now: datetime, policy: GuardPolicy) -> FleetSnapshot:
    """The snapshot the guard decides on, from (rack, state, state_since) triples: every
    count of capacity (the guard, `fleet status`, the exporter's budget) is this one."""
    return snapshot_from_states([(rack, counted_state(state, since, now, policy)) for rack, state, since in nodes])


def count_gpus_out(snapshot: FleetSnapshot, gpus: Iterable[tuple[str, str, str, str, int]]) -> FleetSnapshot:
    """The snapshot with the GPUs out counted, each (rack, node, node's state, GPU, the node's
    GPU count) as 1/N of its node in its rack; one of a node out of service is not counted
    again (the node is, whole)."""
    for rack, node, state, gpu, gpus_on_node in gpus:
        if NodeState(state).in_service:
            snapshot.racks.setdefault(rack, RackCounts()).gpus_out += 1.0 / max(1, gpus_on_node)
            snapshot.gpus_quarantined.append(gpu_grant_key(node, gpu))
    return snapshot


def snapshot_from_states(nodes: list[tuple[str, str]]) -> FleetSnapshot:
    """Build a snapshot from (rack, state) pairs."""
    snap = FleetSnapshot()
    for rack, state in nodes:
        counts = snap.racks.setdefault(rack, RackCounts())
        node_state = NodeState(state)
        counts.serving += node_state.in_serving_fleet
        counts.unavailable += node_state.out_of_service
        counts.production += node_state.in_service
    return snap
