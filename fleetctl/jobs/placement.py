"""Where a restarted job should run again: in its own island first, anywhere if it must. Pure.

A job restarted off a bad node keeps its good nodes; the replacements for the bad ones come
from the job's island (InfiniBand island / NVLink domain, from the inventory) when it has
enough healthy free nodes, nearest first (a leaf switch one of the job's nodes is on, then
the rest of the island, by name); the island's hot spares (fleetctl.jobs.spares) come before any
of them, since the scheduler keeps them free for exactly this. Otherwise the scheduler picks from the whole fleet, as it
did before topology was known, and the restart says so. The restart records the decision
and, once the job runs, where it landed.

NVLink domains (a GB200 NVL72 rack, the inventory's `nvlink_domain`) are the unit a job's
GPUs talk over NVLink in: a job of a domain that loses a node takes its replacements from the
same domain when that has enough healthy free nodes (its spares first); else it moves whole
to another healthy domain with room for all of it (the job's island first, then by name),
since a job split over two domains loses NVLink between its halves; else the fleet, said
so. A node of a held domain (one whose fabric failed: IMEX down, an NVSwitch tray) is never
a replacement, whatever the job.

An unchecked node (`Unchecked` in `node list`: no check has run on it; or `Stale`: its newest
evidence is older than its fleet's sweep interval and no agent reports) has nothing against it, but
nothing recent for it either: it is chosen after every checked node that fits, spares and
nearness included, and never left out when only it fits (refusing it would send the job to
the whole fleet, where the scheduler takes any node, unchecked ones too). A domain the job
fits in on checked nodes alone comes before one that needs unchecked ones.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass

from fleetctl.nodes.capacity import DOMAIN_FABRIC_CHECKS
from fleetctl.nodes.lifecycle import NodeState

# Placement: what the restart asked of the scheduler.
IN_ISLAND = "island"  # named nodes, every one in the job's island
FLEET_WIDE = "fleet"  # the island had too few healthy free nodes: any healthy node
NOT_PLACED = ""  # no topology to keep to, or a scheduler that cannot be given nodes

# Landed: where the job ran again.
LANDED_IN_ISLAND = "island"
LANDED_OUTSIDE = "outside"


@dataclass(frozen=True)
class Where:
    """A node's place in the fabric ("" when the inventory does not say)."""

    switch: str = ""
    island: str = ""
    domain: str = ""  # the multi-node NVLink domain (nvlink_domain), "" on HGX


@dataclass(frozen=True)
class Placement:
    island: str  # the job's island, "" when its nodes have none
    placement: str  # IN_ISLAND, FLEET_WIDE or NOT_PLACED
    nodes: tuple[str, ...]  # with IN_ISLAND, every node the job runs on next (kept + replacements)
    detail: str  # in words, for the restart's record and the report
    spares: tuple[str, ...] = ()  # the replacements taken from the island's pool of hot spares


def job_island(nodes: Sequence[str], where: Mapping[str, Where]) -> str:
    """The island most of the nodes are in (ties: the first by name); "" when none has one."""
    return _most(where[n].island for n in nodes if n in where)


def job_domain(nodes: Sequence[str], where: Mapping[str, Where]) -> str:
    """The NVLink domain most of the nodes are in (ties: the first by name); "" when none has one."""
    return _most(where[n].domain for n in nodes if n in where)


def _most(values: Iterable[str]) -> str:
    counts = Counter(v for v in values if v)
    if not counts:
        return ""
    most = max(counts.values())
    return min(value for value, count in counts.items() if count == most)


def restart_island(job_nodes: Sequence[str], bad_nodes: Sequence[str], where: Mapping[str, Where]) -> str:
    """The island of a job restarted off bad_nodes: that of its good nodes, or of its bad
    ones when none is left."""
    bad = set(bad_nodes)
    return job_island([n for n in job_nodes if n not in bad], where) or job_island(
        [n for n in job_nodes if n in bad], where
    )


def place_restart(
    job_nodes: Sequence[str],
    bad_nodes: Sequence[str],
    where: Mapping[str, Where],
    free: Sequence[str],
    spares: Sequence[str] = (),
    held_domains: Collection[str] = (),
    unchecked: Collection[str] = (),
) -> Placement:
    """The placement of a job that ran on job_nodes, restarted off bad_nodes.

    `where`: the fabric position of every node fleetctl knows; `free`: the nodes that could
    take the job now (in production, idle in the scheduler, run by the job's scheduler);
    `spares`: the hot spares of every island, taken first (a spare must be free too);
    `held_domains`: the NVLink domains whose fabric is held, none of whose nodes is taken;
    `unchecked`: the free nodes without recent evidence (unchecked_nodes), taken last."""
    bad = set(bad_nodes)
    kept = [n for n in job_nodes if n not in bad]
    needed = len(job_nodes) - len(kept)
    island = restart_island(job_nodes, bad_nodes, where)
    if needed == 0:
        return Placement(island, NOT_PLACED, (), "no bad node in the job's allocation: the scheduler places it")
    held_out = set(held_domains)
    free = [n for n in dict.fromkeys(free) if n in where and not (where[n].domain and where[n].domain in held_out)]
    stale = set(unchecked)
    if domain := job_domain(job_nodes, where):
        return _place_in_domains(job_nodes, bad, where, free, set(spares), held_out, domain, island, stale)
    if not island:
        return Placement(
            "", NOT_PLACED, (), "the job's nodes are in no island in the inventory: the scheduler places it"
        )
    near = {where[n].switch for n in job_nodes if n in where and where[n].switch}
    taken = set(job_nodes) | bad
    held = set(spares)
    candidates = sorted(
        (n for n in free if n not in taken and where[n].island == island),
        key=lambda n: (n in stale, n not in held, where[n].switch not in near, n),
    )
    if len(candidates) < needed:
        return Placement(
            island,
            FLEET_WIDE,
            (),
            f"island {island} has {len(candidates)} healthy free node{'s' if len(candidates) != 1 else ''} "
            f"of {needed} needed: any healthy node in the fleet",
        )
    chosen = candidates[:needed]
    on_spares = tuple(n for n in chosen if n in held)
    return Placement(
        island,
        IN_ISLAND,
        (*kept, *chosen),
        f"island {island}: {', '.join(chosen)} for {', '.join(n for n in job_nodes if n in bad)}"
        + _on_spares(on_spares),
        on_spares,
    )


def held_domains(latest_checks: Iterable[tuple[str, str, str]]) -> set[str]:
    """The NVLink domains whose fabric is held, from (domain, check kind, status) of each
    node's latest run of each check: a domain is held while any of its nodes' latest
    domain-fabric check (fleetctl.nodes.capacity.DOMAIN_FABRIC_CHECKS) is not a pass; an
    `error` holds it too, since nothing then says the fabric is whole."""
    return {
        domain for domain, kind, status in latest_checks if domain and kind in DOMAIN_FABRIC_CHECKS and status != "pass"
    }


def _on_spares(spares: Sequence[str]) -> str:
    """What a placement's detail says of the spares it took."""
    return f" (spare{'s' if len(spares) != 1 else ''} {', '.join(spares)})" if spares else ""


def _place_in_domains(
    job_nodes: Sequence[str],
    bad: set[str],
    where: Mapping[str, Where],
    free: Sequence[str],
    held: set[str],
    held_out: set[str],
    domain: str,
    island: str,
    unchecked: set[str],
) -> Placement:
    """place_restart for a job of an NVLink domain: replacements from its own domain, else a
    whole healthy domain for all of the job, else the fleet (`free` holds no held domain's node)."""
    taken = set(job_nodes) | bad
    kept = [n for n in job_nodes if n not in bad]
    replaced = [n for n in job_nodes if n in bad]

    def checked_then_spares(n: str) -> tuple[bool, bool, str]:
        return n in unchecked, n not in held, n

    own = sorted((n for n in free if n not in taken and where[n].domain == domain), key=checked_then_spares)
    if len(own) >= len(replaced):  # a held domain has no node in `free`
        chosen = own[: len(replaced)]
        on_spares = tuple(n for n in chosen if n in held)
        return Placement(
            island,
            IN_ISLAND,
            (*kept, *chosen),
            f"NVLink domain {domain}: {', '.join(chosen)} for {', '.join(replaced)}" + _on_spares(on_spares),
            on_spares,
        )
    why = (
        f"NVLink domain {domain} is held"
        if domain in held_out
        else f"NVLink domain {domain} has {len(own)} healthy free node{'s' if len(own) != 1 else ''} of {len(replaced)} needed"
    )
    by_domain: dict[str, list[str]] = {}
    for n in free:
        if n not in taken and where[n].domain and where[n].domain != domain:
            by_domain.setdefault(where[n].domain, []).append(n)

    def needs_unchecked(d: str) -> bool:
        return sum(n not in unchecked for n in by_domain[d]) < len(job_nodes)

    roomy = sorted(
        (d for d, nodes in by_domain.items() if len(nodes) >= len(job_nodes)),
        key=lambda d: (needs_unchecked(d), job_island(by_domain[d], where) != island, d),
    )
    if not roomy:
        return Placement(
            island,
            FLEET_WIDE,
            (),
            f"{why}, and no other healthy domain has {len(job_nodes)} free: any healthy node in the fleet",
        )
    target = roomy[0]
    chosen = sorted(by_domain[target], key=checked_then_spares)[: len(job_nodes)]
    on_spares = tuple(n for n in chosen if n in held)
    return Placement(
        job_island(chosen, where),
        IN_ISLAND,
        tuple(chosen),
        f"{why}: the whole job moves to NVLink domain {target}, {', '.join(chosen)}" + _on_spares(on_spares),
        on_spares,
    )


def landed(island: str, new_nodes: Sequence[str], where: Mapping[str, Where]) -> str:
    """Where a restarted job ran again: LANDED_IN_ISLAND when every node is in its island,
    LANDED_OUTSIDE when one is not; "" when the job had no island or runs nowhere yet."""
    if not island or not new_nodes:
        return ""
    inside = all(n in where and where[n].island == island for n in new_nodes)
    return LANDED_IN_ISLAND if inside else LANDED_OUTSIDE


def replacements(nodes_before: Sequence[str], new_nodes: Sequence[str]) -> list[str]:
    """The nodes a restarted job took in place of the bad ones: those it runs on now and did not
    before the restart. Without the nodes before (a restart recorded before they were, or one
    whose job was already pending), every node it runs on now: none can be told apart."""
    if not nodes_before:
        return list(new_nodes)
    before = set(nodes_before)
    return [n for n in new_nodes if n not in before]


def placement_counts(restarts: Sequence[tuple[str | None, str | None]]) -> dict[str, dict[str, int]]:
    """(placement, landed) of each restart -> how many asked for the island, fell back to the
    fleet or were not placed ("none"), and how many landed in their island or outside."""
    asked = Counter(placement or "none" for placement, _ in restarts)
    where = Counter(where for _, where in restarts if where)
    return {
        "asked": {k: asked[k] for k in (IN_ISLAND, FLEET_WIDE, "none")},
        "landed": {k: where[k] for k in (LANDED_IN_ISLAND, LANDED_OUTSIDE)},
    }


# Which nodes may take a restarted job, or be held as a hot spare.

# The conditions (fleetctl.nodes.conditions) that keep a production node from taking a
# restarted job or a place in a spare pool: evidence against it (a failed or erroring
# check, a suspect or straggler finding, checks that cannot reach it), a drain the capacity
# guard holds (the node is bad, only kept in service for capacity), a workflow that would
# not act on its next fault, or a runbook run that failed or stuck on it (an operator's turn). `Unchecked` is not among them: an adopted node has run no check
# yet, a node a sweep has not reached lately has only old evidence, and nothing says either
# is bad (place_restart takes them last, unchecked_nodes).
UNFIT_CONDITIONS = frozenset(
    {
        "Stalled",
        "Suspect",
        "Unreachable",
        "CheckFailed",
        "CheckError",
        "DrainHeld",
        "DrainedOutside",
        "StragglerSuspected",
        "RemediationFailed",
        "RemediationStuck",
    }
)


@dataclass(frozen=True)
class NodeHealth:
    """A node as a restart or a spare pool sees it: plain rows, read by the caller."""

    name: str
    state: str  # its lifecycle state
    conditions: tuple[str, ...] = ()  # the types of its conditions (fleetctl.nodes.conditions.conditions)
    open_stragglers: int = 0  # straggler findings on it still open


def unfit(node: NodeHealth) -> str:
    """Why the node may not take a restarted job or be a spare, in words; "" when it may."""
    if node.state != NodeState.PRODUCTION.value:
        return f"in {node.state}, not production"
    against = [c for c in node.conditions if c in UNFIT_CONDITIONS]
    if node.open_stragglers and "StragglerSuspected" not in against:
        against.append("StragglerSuspected")
    return ", ".join(against)


# How many unfit nodes a refused restart names; the rest are counted.
NAMED_IN_REFUSAL = 5


@dataclass(frozen=True)
class Exclusions:
    """What a restart tells its scheduler to keep the job off, or why it may not restart it."""

    nodes: tuple[str, ...]  # the bad nodes, then the unfit ones
    refused: str = ""  # non-empty: the restart must wait, for this reason


def restart_exclusions(
    scheduler: str,
    bad_nodes: Sequence[str],
    unfit_nodes: Mapping[str, str],
    named: Collection[str] = (),
    told: bool = True,
    kept_off: Collection[str] = (),
) -> Exclusions:
    """The nodes a restarted job must avoid: the bad ones and every unfit one
    (`unfit_nodes`: name -> why, from unfit), but those it is named onto (chosen healthy; on
    a retry one may have turned unfit since). `told`: the scheduler keeps a job off the nodes
    it is told to (Slurm's ExcNodeList, the simulated scheduler's). One that cannot be told
    (Kubernetes: a job's controller recreates its pods, placed on any schedulable node) keeps
    the job off only what it keeps every job off (`kept_off`: cordoned); an unfit node it
    would still place work on refuses the restart, naming the nodes and why, until each is
    cordoned or fit: a restart never risks landing on one."""
    if told:
        return Exclusions(tuple(dict.fromkeys([*bad_nodes, *(n for n in unfit_nodes if n not in named)])))
    kept = set(kept_off)
    open_to_it = [n for n in unfit_nodes if n not in kept and n not in bad_nodes]
    if not open_to_it:
        return Exclusions(tuple(bad_nodes))
    shown = "; ".join(f"{n} ({unfit_nodes[n]})" for n in open_to_it[:NAMED_IN_REFUSAL])
    more = len(open_to_it) - NAMED_IN_REFUSAL
    return Exclusions(
        tuple(bad_nodes),
        f"the {scheduler} scheduler cannot be told to keep a job off a node, and would place it on "
        f"unfit node{'s' if len(open_to_it) != 1 else ''} {shown}"
        + (f" and {more} more" if more > 0 else "")
        + ": the restart waits until each is cordoned or fit",
    )


def healthy_replacements(nodes: Iterable[NodeHealth]) -> list[str]:
    """The nodes that may take a restarted job or be held as spares, in the order given."""
    return [n.name for n in nodes if not unfit(n)]


def unchecked_nodes(nodes: Iterable[NodeHealth]) -> set[str]:
    """The nodes without recent evidence (`Unchecked`: never checked; `Stale`: their newest
    check older than the sweep interval with no agent reporting): place_restart takes them last."""
    return {n.name for n in nodes if {"Unchecked", "Stale"} & set(n.conditions)}


# Which of a job's nodes a restart moves it off.


def nodes_to_leave(job_nodes: Iterable[str], node_states: Mapping[str, str]) -> list[str]:
    """The job's nodes that fleetctl has out of production, in the job's order. A node fleetctl
    does not manage (absent from `node_states`) is not chosen: nothing says it is bad."""
    return [n for n in job_nodes if n in node_states and not NodeState(node_states[n]).in_service]


def not_in_job(job_nodes: Iterable[str], named: Iterable[str]) -> list[str]:
    """The nodes an operator named that the job does not run on."""
    job_nodes = set(job_nodes)
    return [n for n in named if n not in job_nodes]
