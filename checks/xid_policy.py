"""A site's Xid and signature policy: the file the `xid_policy` setting names (FLEETCTL_XID_POLICY),
which changes what NVIDIA's catalog (checks/catalog/xid.tsv, signatures.tsv) says a fault is.

    xid:
      43: {severity: info}                               # this fleet throws it harmlessly
      13: {drain_after: {count: 5, window_s: 3600}}      # a warning that drains after 5 in 1 h
      48: {scope: gpu}                                   # one GPU's fault takes that GPU out, not the node
    signatures:
      nvswitch_sxid_nonfatal: {severity: critical}

A rule may demote a code below the catalog (the site's informed choice) or promote it, and may
set how many of a code within a window drain the node. `scope: gpu` says a code names a fault
confined to the GPU that logged it (NVIDIA's XID 48, 94, 64 on one GPU): fleetctl takes that
GPU out of its scheduler and leaves the node's others working (fleetctl.nodes.gpu_quarantine);
`scope: node`, the default, drains the node. Counting is by Xid: a node's recorded
events keep a fault's code, not its signature, so a signature's rule sets only its severity.
Validated whole when loaded, like the site profiles: a file with one bad rule is refused in
one line (XidPolicyError), never half used. Pure: the file in, the policy out.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import Enum
from functools import cache
from pathlib import Path
from typing import Any

from fleetctl.checks.result import SEVERITIES
from fleetctl.checks.safe_yaml import YamlRefused, load_file
from fleetctl.checks.signatures import signatures

# The highest Xid a kernel reports (the driver prints a 16-bit code); `fleetctl node event --xid` takes as many.
MAX_XID = 65535
# A count-in-window rule: at least two (one is the severity's business), at most what a node's
# recorded events can show; a window from a minute to a month (a retention the events outlive).
MAX_DRAIN_COUNT = 1000
WINDOW_S_BOUNDS = (60.0, 30 * 86400.0)
_RULE_KEYS = {"severity", "drain_after", "scope"}


class FaultScope(str, Enum):
    """What a code's fault takes out of service: the node, or only the GPU that logged it."""

    NODE = "node"
    GPU = "gpu"


class XidPolicyError(ValueError):
    """A policy file that cannot be used, said in one line naming the file and the rule."""


@dataclass(frozen=True)
class DrainAfter:
    """This many of a code within `window_s` drain the node."""

    count: int
    window_s: float


@dataclass(frozen=True)
class Rule:
    severity: str = ""  # "": the catalog's
    drain_after: DrainAfter | None = None  # None: the catalog's repeat rule
    scope: FaultScope = FaultScope.NODE


@dataclass(frozen=True)
class XidPolicy:
    """The site's rules over the catalog; `source` names the file ("" for the catalog alone)."""

    source: str = ""
    xids: Mapping[int, Rule] = field(default_factory=dict)
    signatures: Mapping[str, Rule] = field(default_factory=dict)


# NVIDIA's catalog alone: what every reader uses where no site file is set.
CATALOG = XidPolicy()


def parse_xid_policy(raw: Any, source: str) -> XidPolicy:
    """One policy document, validated; XidPolicyError says what is wrong (without the file's name)."""
    if raw is None:
        return XidPolicy(source)
    if not isinstance(raw, dict) or set(raw) - {"xid", "signatures"}:
        raise XidPolicyError("expected a mapping with xid and/or signatures")
    xids: dict[int, Rule] = {}
    for code, rule in _mapping(raw.get("xid"), "xid").items():
        if isinstance(code, bool) or not isinstance(code, int) or not 1 <= code <= MAX_XID:
            raise XidPolicyError(f"xid: {str(code)[:20]!r} is not an Xid code (1 to {MAX_XID})")
        xids[code] = _rule(rule, f"xid {code}", countable=True)
    known = signatures()
    named: dict[str, Rule] = {}
    for name, rule in _mapping(raw.get("signatures"), "signatures").items():
        if name not in known:
            raise XidPolicyError(
                f"signatures: {str(name)[:40]!r} is not a catalog signature (checks/catalog/signatures.tsv)"
            )
        named[name] = _rule(rule, f"signature {name}", countable=False)
    return XidPolicy(source, xids, named)


def _mapping(value: Any, where: str) -> dict[Any, Any]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise XidPolicyError(f"{where}: expected a mapping")
    return value


def _rule(raw: Any, where: str, countable: bool) -> Rule:
    if not isinstance(raw, dict) or not raw or set(raw) - _RULE_KEYS:
        raise XidPolicyError(f"{where}: expected a mapping with severity and/or drain_after and/or scope")
    severity = raw.get("severity", "")
    if severity not in ("", *SEVERITIES):
        raise XidPolicyError(f"{where}: severity {str(severity)[:20]!r} is not one of {', '.join(SEVERITIES)}")
    drain_after = None
    if "drain_after" in raw:
        if not countable:
            raise XidPolicyError(f"{where}: drain_after counts Xid codes only (events keep a fault's code)")
        drain_after = _drain_after(raw["drain_after"], where)
    return Rule(str(severity), drain_after, _scope(raw.get("scope", FaultScope.NODE.value), where, countable))


def _scope(raw: Any, where: str, countable: bool) -> FaultScope:
    scopes = ", ".join(s.value for s in FaultScope)
    if not isinstance(raw, str) or raw not in {s.value for s in FaultScope}:
        raise XidPolicyError(f"{where}: scope {str(raw)[:20]!r} is not one of {scopes}")
    if raw == FaultScope.GPU.value and not countable:
        # A signature's event names no GPU by an Xid line (an NVSwitch, a port, the fabric).
        raise XidPolicyError(f"{where}: scope gpu is for Xid codes only (a signature's fault names no one GPU)")
    return FaultScope(raw)


def fault_scope(policy: XidPolicy, code: int | None) -> FaultScope:
    """What the site's policy says a fault of `code` takes out: the node unless a rule says gpu."""
    rule = policy.xids.get(code) if code is not None else None
    return rule.scope if rule is not None else FaultScope.NODE


def _drain_after(raw: Any, where: str) -> DrainAfter:
    if not isinstance(raw, dict) or set(raw) != {"count", "window_s"}:
        raise XidPolicyError(f"{where}: drain_after: expected {{count: N, window_s: SECONDS}}")
    count, window = raw["count"], raw["window_s"]
    if isinstance(count, bool) or not isinstance(count, int) or not 2 <= count <= MAX_DRAIN_COUNT:
        raise XidPolicyError(
            f"{where}: drain_after.count: {str(count)[:20]!r} is not a whole number 2..{MAX_DRAIN_COUNT}"
        )
    low, high = WINDOW_S_BOUNDS
    if (
        isinstance(window, bool)
        or not isinstance(window, (int, float))
        or not math.isfinite(window)
        or not low <= window <= high
    ):
        raise XidPolicyError(
            f"{where}: drain_after.window_s: {str(window)[:20]!r} is outside {low:g}..{high:g} seconds"
        )
    return DrainAfter(count, float(window))


def load_xid_policy(path: str | Path | None) -> XidPolicy:
    """The policy in the file `path` names (None or "": the catalog alone), read again whenever
    the file changes. XidPolicyError for a file missing, unreadable or invalid."""
    if not path:
        return CATALOG
    file = Path(path).expanduser()
    try:
        mtime_ns = file.stat().st_mtime_ns
    except OSError as exc:
        raise XidPolicyError(f"xid policy {file}: cannot read ({exc.strerror})") from None
    return _load(str(file), mtime_ns)


@cache
def _load(path: str, mtime_ns: int) -> XidPolicy:
    """A policy file, keyed by its modification time: an edited file is read again."""
    del mtime_ns
    try:
        return parse_xid_policy(load_file(path), path)
    except YamlRefused as exc:  # names the path itself
        raise XidPolicyError(f"xid policy {exc}") from None
    except XidPolicyError as exc:
        raise XidPolicyError(f"xid policy {path}: {exc}") from None
