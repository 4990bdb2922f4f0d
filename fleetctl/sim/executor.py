"""The Executor for simulated nodes (`sim://NAME`): each command builds the node's state at
this moment and runs it through the node's shell.

Faults are SimFaultSpec rows the caller stores (the CLI injects, the worker's checks see
them): this module reads them through `faults_for` and never touches a database. Run-to-run
jitter comes from a per-command counter.
"""

from __future__ import annotations

import os
import random
import shlex
import time
from collections import Counter
from collections.abc import Callable, Sequence

from fleetctl.checks.profiles import load_profile
from fleetctl.executors.base import CommandResult, CommandTimeout, NodeTarget, NodeUnreachable, validate_node_name
from fleetctl.sim import SIM_SCHEME
from fleetctl.sim.faults import SimFaultSpec, active_faults
from fleetctl.sim.node import DomainMember, NodeState, SimLeaf, build_node_state, domain_address, identity_rng
from fleetctl.sim.profiles import SimProfile, sim_profile
from fleetctl.sim.shell import STRESS_TOOLS, NodeShell


def sim_node_name(target: NodeTarget) -> str:
    if not target.address.startswith(SIM_SCHEME):
        raise ValueError(f"{target.name}: {target.address!r} is not a simulated node (want {SIM_SCHEME}NAME)")
    return validate_node_name(target.address[len(SIM_SCHEME) :])


# A simulated command's wall time passes in slices this long: an exception raised into the
# activity's thread (Temporal's cancellation of a check a critical event cut short) lands
# between two slices, as a killed remote command ends a real check, instead of after an HPL's
# whole run.
SLEEP_SLICE_S = 0.1


def sleep_in_slices(seconds: float) -> None:
    deadline = time.monotonic() + seconds
    while (left := deadline - time.monotonic()) > 0:
        time.sleep(min(left, SLEEP_SLICE_S))


class SimExecutor:
    """The Executor for `sim://` nodes.

    `faults_for(name)` returns a node's fault specs and `booted_at(name)` when its BMC last
    rebooted it (both stored by the caller, shared between processes); `cure(name, kinds)`
    clears the faults a command repaired (a GPU reset, a firmware update). Without them a
    node keeps the faults it is given and boots at its own phase. `domain_members(name)` names
    the nodes of its multi-node NVLink domain, itself among them (the inventory's
    nvlink_domain; [] for a node in none): what IMEX on a GB200 tray lists. `leaf(name)` is its
    leaf switch (the inventory's switch) with the faults injected on any node of it; None for a
    node on none: a multi-node run across leaves goes through their uplinks. A command takes its real
    duration times `time_scale` (0 = instant) of wall time, through `sleep` (`sleep_in_slices`); `now` is the
    clock faults and timestamps are read from.
    """

    def __init__(
        self,
        faults_for: Callable[[str], list[SimFaultSpec]],
        seed: int = 0,
        time_scale: float = 0.0,
        now: Callable[[], float] = time.time,
        sleep: Callable[[float], None] | None = None,
        booted_at: Callable[[str], float | None] = lambda name: None,
        cure: Callable[[str, frozenset[str]], object] = lambda name, kinds: None,
        domain_members: Callable[[str], list[str]] = lambda name: [],
        leaf: Callable[[str], SimLeaf | None] = lambda name: None,
    ):
        if time_scale < 0:
            raise ValueError(f"time_scale must be 0 or more, not {time_scale}")
        self._faults_for = faults_for
        self._seed = seed
        self._time_scale = time_scale
        self._now = now
        self._sleep = sleep or sleep_in_slices
        self._booted_at = booted_at
        self._cure = cure
        self._domain_members = domain_members
        self._leaf = leaf
        # Per node and command: the n-th run gets its own jitter and flaky outcome.
        self._runs: Counter[tuple[str, tuple[str, ...]]] = Counter()

    def run(self, target: NodeTarget, argv: Sequence[str], timeout_s: float) -> CommandResult:
        name = sim_node_name(target)
        if target.profile is None:
            raise ValueError(f"{target.name}: a simulated node needs its GPU profile (the inventory's `profile`)")
        profile = sim_profile(target.profile)
        now = self._now()
        faults = active_faults(self._faults_for(target.name), now)
        if any(f.kind == "unreachable" for f in faults):
            raise NodeUnreachable(target.name, f"ssh: connect to host {name} port {target.port}: Connection timed out")
        key = (name, tuple(argv))
        run_number = self._runs[key]
        self._runs[key] += 1
        flaky = [f for f in faults if f.kind == "flaky"]
        transient = (
            bool(flaky)
            and _touches_stress_tool(argv)
            and any(random.Random(f"{self._seed}/{name}/flaky/{f.seed}/{run_number}").random() < 0.5 for f in flaky)
        )
        state = build_node_state(
            name,
            profile,
            self._seed,
            faults,
            now,
            transient,
            self._booted_at(target.name),
            self._domain(target.name, target.profile, now),
            self._active_leaf(target.name, now),
        )
        jitter = identity_rng(self._seed, name, "run", *argv, run_number)
        result = NodeShell(state, jitter, lambda host: self._peer(host, profile, now)).run(argv)
        wall_s = result.seconds * self._time_scale
        if wall_s > timeout_s:
            self._sleep(timeout_s)
            raise CommandTimeout(target.name, f"{shlex.join(argv)} still running after {timeout_s:g} s")
        self._sleep(wall_s)
        if result.cures:
            self._cure(target.name, result.cures)
        out = result.output
        return CommandResult(tuple(argv), out.exit_status, out.stdout, out.stderr, wall_s)

    def _domain(self, name: str, profile: str, now: float) -> list[DomainMember]:
        """The trays of the node's NVLink domain in name order (IMEX's node order is its
        nodes_config.cfg's), each with whether its IMEX daemon runs now: not on a tray with
        imex-down, nor on one that does not answer. A tray of a domain's profile that the fleet
        names no domain for is a domain of its own (its GPUs still register with their fabric)."""
        if not load_profile(profile).nvlink_domain_gpus:
            return []  # HGX: its NVLink ends at the chassis (the fleet is not asked)
        members = sorted(self._domain_members(name)) or [name]
        down = {"imex-down", "unreachable"}
        return [
            DomainMember(
                member,
                domain_address(self._seed, members, member),
                not any(f.kind in down for f in active_faults(self._faults_for(member), now)),
            )
            for member in members
        ]

    def _peer(self, host: str, profile: SimProfile, now: float) -> NodeState | None:
        """Another node an MPI launcher reaches by its host name (its node name here), as its
        tools see it now; None when it does not answer. Pairs run within one profile."""
        try:
            validate_node_name(host)
        except ValueError:
            return None
        faults = active_faults(self._faults_for(host), now)
        if any(f.kind == "unreachable" for f in faults):
            return None
        return build_node_state(
            host, profile, self._seed, faults, now, False, self._booted_at(host), leaf=self._active_leaf(host, now)
        )

    def _active_leaf(self, name: str, now: float) -> SimLeaf | None:
        leaf = self._leaf(name)
        return None if leaf is None else SimLeaf(leaf.name, tuple(active_faults(leaf.faults, now)))

    def close(self) -> None:
        """Nothing to release: a simulated node holds no connection."""


def _touches_stress_tool(argv: Sequence[str]) -> bool:
    words = [os.path.basename(w) for arg in argv for w in arg.split()]
    return any(w in STRESS_TOOLS for w in words)
