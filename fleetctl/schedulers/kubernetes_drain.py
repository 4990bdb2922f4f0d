"""How a Kubernetes drain treats a node's pods and says so: the rules, the options and their
checks against the settings. Pure, and light: fleetctl.config checks these settings at load
without importing the Kubernetes client (fleetctl.schedulers.kubernetes uses them).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Protocol

Json = dict[str, Any]

DRAIN_ACTIONS = ("evict", "wait", "delete")
TAINT_EFFECTS = ("NoSchedule", "NoExecute")
LIFECYCLE_CONDITIONS = ("DrainInProgress", "Drained", "MaintenanceInProgress")
MAX_GRACE_PERIOD_S = 86400

# Node names go into field selectors and job names into label selectors: a comma or an
# '=' there would widen the selection, so both are checked against what Kubernetes allows.
NAMESPACE_RE = re.compile(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?")
LABEL_VALUE_RE = re.compile(r"[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?")
# A label or annotation key: an optional DNS-subdomain prefix and a name.
_KEY = re.compile(
    r"([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?"
    r"[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?"
)
_KIND = re.compile(r"[A-Z][A-Za-z0-9]{0,62}")
_CONDITION_TYPE = re.compile(r"[A-Z][A-Za-z0-9]{0,62}")


class DrainSettings(Protocol):
    """The settings a drain's options come from (fleetctl.config.Settings has them)."""

    kube_do_not_evict_annotation: str
    kube_infrastructure_owner_kinds: str
    kube_eviction_grace_period_s: int
    kube_critical_taint_effect: str
    kube_health_condition: str
    kube_drain_policy: str


@dataclass(frozen=True)
class DrainRule:
    """Pods in `namespace`, or labelled `label_key=label_value`, are drained by `action`."""

    action: str
    namespace: str | None = None
    label_key: str | None = None
    label_value: str | None = None

    def matches(self, pod: Json) -> bool:
        metadata = pod.get("metadata") or {}
        if self.namespace is not None:
            return metadata.get("namespace") == self.namespace
        return (metadata.get("labels") or {}).get(self.label_key or "") == self.label_value


@dataclass(frozen=True)
class DrainOptions:
    """How a drain treats a node's pods and how it says so (from Settings; see kubernetes_options)."""

    # First matching rule wins; a pod no rule matches is evicted.
    policy: tuple[DrainRule, ...] = ()
    do_not_evict_annotation: str = "fleetctl.io/do-not-evict"
    # Owners whose pods are the node's infrastructure (slurmd under the Slurm operator).
    infrastructure_owner_kinds: frozenset[str] = field(default_factory=lambda: frozenset({"NodeSet"}))
    # Passed with each eviction or deletion; None: each pod's own terminationGracePeriodSeconds.
    grace_period_s: int | None = None
    critical_taint_effect: str = "NoExecute"
    health_condition: str = "GpuHealthy"


def parse_drain_policy(text: str) -> tuple[DrainRule, ...]:
    """'namespace:serving=wait, label:app=vllm=delete' -> rules, in order; ValueError if malformed.

    Each rule is `namespace:NAME=ACTION` or `label:KEY=VALUE=ACTION`, ACTION one of evict,
    wait, delete.
    """
    rules = []
    for term in (part.strip() for part in text.split(",")):
        if not term:
            continue
        selector, equals, action = term.rpartition("=")
        kind, colon, target = selector.partition(":")
        if not equals or not colon or action not in DRAIN_ACTIONS:
            raise ValueError(
                f"drain policy rule {term!r}: expected namespace:NAME=ACTION or "
                f"label:KEY=VALUE=ACTION, ACTION one of {', '.join(DRAIN_ACTIONS)}"
            )
        if kind == "namespace" and NAMESPACE_RE.fullmatch(target):
            rules.append(DrainRule(action, namespace=target))
            continue
        key, equals, value = target.partition("=")
        if kind == "label" and equals and _KEY.fullmatch(key) and (value == "" or LABEL_VALUE_RE.fullmatch(value)):
            rules.append(DrainRule(action, label_key=key, label_value=value))
            continue
        raise ValueError(
            f"drain policy rule {term!r}: {kind or 'selector'} {target!r} is not a valid "
            "namespace:NAME or label:KEY=VALUE"
        )
    return tuple(rules)


def kubernetes_options(settings: DrainSettings) -> DrainOptions:
    """The drain options the settings name; ValueError, saying which setting, if one is invalid."""
    if not _KEY.fullmatch(settings.kube_do_not_evict_annotation):
        raise ValueError(
            f"kube_do_not_evict_annotation: {settings.kube_do_not_evict_annotation!r} is not an annotation key"
        )
    kinds = frozenset(kind.strip() for kind in settings.kube_infrastructure_owner_kinds.split(",") if kind.strip())
    if bad := sorted(kind for kind in kinds if not _KIND.fullmatch(kind)):
        raise ValueError(f"kube_infrastructure_owner_kinds: {', '.join(map(repr, bad))} is not a Kubernetes kind")
    grace = settings.kube_eviction_grace_period_s
    if not -1 <= grace <= MAX_GRACE_PERIOD_S:
        raise ValueError(
            f"kube_eviction_grace_period_s: {grace} is not between -1 (the pod's own) and {MAX_GRACE_PERIOD_S}"
        )
    if settings.kube_critical_taint_effect not in TAINT_EFFECTS:
        raise ValueError(
            f"kube_critical_taint_effect: {settings.kube_critical_taint_effect!r} is not one of "
            f"{', '.join(TAINT_EFFECTS)}"
        )
    if not _CONDITION_TYPE.fullmatch(settings.kube_health_condition) or settings.kube_health_condition in (
        "Ready",
        *LIFECYCLE_CONDITIONS,
    ):
        raise ValueError(
            f"kube_health_condition: {settings.kube_health_condition!r} is not a condition type "
            "of fleetctl's own (UpperCamelCase, not Ready or a lifecycle condition)"
        )
    try:
        policy = parse_drain_policy(settings.kube_drain_policy)
    except ValueError as exc:
        raise ValueError(f"kube_drain_policy: {exc}") from None
    return DrainOptions(
        policy=policy,
        do_not_evict_annotation=settings.kube_do_not_evict_annotation,
        infrastructure_owner_kinds=kinds,
        grace_period_s=None if grace == -1 else grace,
        critical_taint_effect=settings.kube_critical_taint_effect,
        health_condition=settings.kube_health_condition,
    )
