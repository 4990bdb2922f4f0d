"""ClusterValidation's payloads: an all-reduce across a set of nodes and the bisection that
names what slows it (fleetctl.validation)."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class ValidationInput:
    """Which nodes (fleetctl.validation.scope.Scope's fields; all empty: every production node
    of the fleet) and how many runs at most (0: the bisection's default for the count)."""

    names: list[str] = field(default_factory=list)  # node names or host lists
    island: str = ""
    rack: str = ""
    domain: str = ""
    labels: dict[str, str] = field(default_factory=dict)
    idle: bool = False  # only the idle production nodes (those no job runs on)
    fleet: str = "default"
    actor: str = "validate"
    max_runs: int = 0


@dataclass
class ValidationNodes:
    """The scope and, for an idle scope, the idle production nodes (read from the schedulers)."""

    scope: ValidationInput
    idle: list[str] | None = None


@dataclass
class ValidationRun:
    """One all-reduce across `nodes`, launched on the first; `key` makes its check run once."""

    nodes: list[str]
    key: str
    index: int = 0


@dataclass
class ValidationRunOutcome:
    nodes: list[str]
    verdict: str  # fleetctl.validation.bisect.RunVerdict
    busbw_gbps: float | None = None
    reason: str = ""
    check_run_id: int | None = None


@dataclass
class ValidationResult:
    nodes: list[str] = field(default_factory=list)  # validated (held), sorted
    skipped: dict[str, str] = field(default_factory=dict)  # node: why it was not held
    runs: list[ValidationRunOutcome] = field(default_factory=list)
    bad_nodes: list[str] = field(default_factory=list)
    # Groups of nodes each fine apart (or beside a cleared node) but slow together: the fabric between them.
    slow_together: list[list[list[str]]] = field(default_factory=list)
    unresolved: list[list[str]] = field(default_factory=list)
    error: str = ""
    passed: bool = False
