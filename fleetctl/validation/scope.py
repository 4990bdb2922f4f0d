"""Which nodes a validation runs across: named nodes (or host lists), an island, a rack, an
NVLink domain, a label selector, the idle part of the fleet; several narrow each other. Pure.

Only production nodes are validated: they are held in their scheduler for it as a check holds
a node (docs/concepts.md, "The node's hold"), and one all-reduce needs every rank on the same
kind of machine, so the nodes share one GPU profile."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from fleetctl.inventory.hostlist import compress, expand_all

VALIDATED_STATE = "production"


class ScopeError(ValueError):
    """The scope names no usable set of nodes (one line, for the operator)."""


class ScopedNode(Protocol):
    """What choosing reads of a node (a `nodes` row)."""

    @property
    def name(self) -> str: ...
    @property
    def rack(self) -> str: ...
    @property
    def island(self) -> str: ...
    @property
    def nvlink_domain(self) -> str: ...
    @property
    def profile(self) -> str: ...
    @property
    def state(self) -> str: ...
    @property
    def labels(self) -> dict[str, Any]: ...


@dataclass(frozen=True)
class Scope:
    """What the operator asked for; empty fields do not narrow. `idle`: the names of the idle
    production nodes when only those are wanted, None otherwise."""

    names: tuple[str, ...] = ()  # node names or host lists (gpu-[001-032])
    island: str = ""
    rack: str = ""
    domain: str = ""
    labels: Mapping[str, str] = field(default_factory=dict)
    idle: frozenset[str] | None = None

    def describe(self) -> str:
        parts = [
            *([compress(expand_all(self.names))] if self.names else []),
            *([f"island {self.island}"] if self.island else []),
            *([f"rack {self.rack}"] if self.rack else []),
            *([f"NVLink domain {self.domain}"] if self.domain else []),
            *([",".join(f"{k}={v}" for k, v in sorted(self.labels.items()))] if self.labels else []),
            *(["idle"] if self.idle is not None else []),
        ]
        return " ".join(parts) or "every production node"


def select_nodes(nodes: Sequence[ScopedNode], scope: Scope) -> list[str]:
    """The names of the production nodes in `scope`, sorted. Raises ScopeError for a host list
    that does not parse, a name the fleet does not have, a named node not in production, fewer
    than two nodes, or nodes of more than one GPU profile."""
    by_name = {n.name: n for n in nodes}
    try:
        named = expand_all(scope.names)
    except ValueError as exc:
        raise ScopeError(str(exc)) from None
    unknown = [n for n in named if n not in by_name]
    if unknown:
        raise ScopeError(f"unknown node{'s' if len(unknown) > 1 else ''}: {compress(unknown)}")
    out = [n for n in named if by_name[n].state != VALIDATED_STATE]
    if out:
        raise ScopeError(
            f"{compress(out)}: not in production ({by_name[out[0]].state}): only production nodes are validated"
        )
    pool = [by_name[name] for name in dict.fromkeys(named)] if named else nodes
    chosen = [n for n in pool if n.state == VALIDATED_STATE and _in_scope(n, scope)]
    if len(chosen) < 2:
        raise ScopeError(
            f"{scope.describe()}: {len(chosen)} production node{'' if len(chosen) == 1 else 's'}; "
            "an all-reduce across nodes needs 2 or more"
        )
    profiles = sorted({n.profile for n in chosen})
    if len(profiles) > 1:
        raise ScopeError(
            f"{scope.describe()}: nodes of {len(profiles)} GPU profiles ({', '.join(profiles)}); "
            "one all-reduce runs on one kind of machine: narrow the scope"
        )
    return sorted(n.name for n in chosen)


def _in_scope(node: ScopedNode, scope: Scope) -> bool:
    return (
        (not scope.island or node.island == scope.island)
        and (not scope.rack or node.rack == scope.rack)
        and (not scope.domain or node.nvlink_domain == scope.domain)
        and all(str(node.labels.get(k)) == v for k, v in scope.labels.items())
        and (scope.idle is None or node.name in scope.idle)
    )
