"""RMA evidence bundles: what a vendor needs to accept a part back, as JSON and Markdown.
Pure: the webhook that carries them to a ticketing system is fleetctl.connections.webhook_client.

The bundle is built from what fleetctl recorded (identity and firmware read by the checks,
the failing check outputs, the node's health events since it last entered production, the
remediation steps tried). Secrets never enter it: credentials in URLs, `password=`/`token=`
pairs and Authorization headers are masked in every string, and so is every configured
secret value verbatim.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from functools import cache
from typing import TYPE_CHECKING, Any

from fleetctl.nodes.capacity import GuardPolicy, storm_limit
from fleetctl.text import printable

if TYPE_CHECKING:
    from jinja2 import Environment

# The bundle's format: version 2 holds every health event of the node since it last entered
# production (`health_history`), where version 1 held the CLI's `--xid` events (`xid_history`).
EVIDENCE_SCHEMA = "fleetctl.rma/2"
# How much of one check's raw output goes into the bundle: enough for the failing lines.
RAW_OUTPUT_EXCERPT_CHARS = 4000
MASK = "***"

_SECRET_PATTERNS = (
    re.compile(r"(?i)\b(authorization\s*:\s*)(?:basic|bearer|token)?\s*\S+"),
    re.compile(r"(?i)\b((?:password|passwd|pwd|secret|token|api[_-]?key)\s*[=:]\s*)\S+"),
    re.compile(r"(://[^/\s:@]+:)[^@/\s]+(@)"),
)


# How an RMA ended, from its record: what rule precision scores a removal that went to RMA by.
RMA_OPEN, RMA_REPLACED, RMA_NO_FAULT_FOUND = "open", "replaced", "no_fault_found"
# A record's status: an RMA held for an operator (a correlated burst, burst_verdict) is
# `awaiting_confirmation` until `rma confirm` opens it (`open`, then `closed`) or `rma reject`
# ends it (`rejected`: nothing went to the vendor).
AWAITING_CONFIRMATION, OPEN, CLOSED, REJECTED = "awaiting_confirmation", "open", "closed", "rejected"


def rma_outcome(status: str, replaced: str | None) -> str:
    """`open` until the RMA is closed; then `replaced` (`rma close --replaced PART`: the
    vendor found the fault and replaced a part) or `no_fault_found` (`rma close
    --no-fault-found`: the part came back as it went; closed with nothing replaced). A
    rejected RMA is an operator's `no_fault_found` before the part left: the operator judged
    the fault not the hardware's (a burst's driver or checker), so the removal was a false alarm."""
    if status == REJECTED:
        return RMA_NO_FAULT_FOUND
    if status != CLOSED:
        return RMA_OPEN
    return RMA_REPLACED if replaced else RMA_NO_FAULT_FOUND


@dataclass(frozen=True)
class BurstVerdict:
    """Whether automation may open a node's RMA now (burst_verdict)."""

    # Why the RMA waits for an operator's confirmation; empty: open it.
    hold: str = ""
    # Ask again at this time (seconds since the epoch): other nodes had critical events near
    # this node's, and the burst they may be the start of can still grow.
    wait_until: float | None = None


def burst_verdict(
    policy: GuardPolicy,
    critical: Iterable[tuple[str, float]],
    production: Collection[str],
    node: str,
    event_at: float | None,
    now: float,
) -> BurstVerdict:
    """Whether `node`'s RMA is held for an operator: critical events on more nodes than the
    guard's storm limit within its storm window of `event_at` (this node's critical event;
    None when it had none, its RMA being a check's verdict: then the window around `now`).

    `critical` are (node, time) of the fleet's critical health events, `production` the fleet's
    nodes in production. The limit is the guard's (storm_limit) over the nodes in
    production before the burst (those in production now and the burst's own). A correlated
    burst is usually a driver, firmware or checker fault, and an RMA costs weeks: the nodes
    stay drained (their drains are critical) and an operator decides, and so does any RMA due
    while the burst is on. While other nodes had critical events near this one's but not yet
    enough, the verdict waits until the window after `event_at` has passed, so that the first
    nodes of a burst are not sent before the rest of it arrives; a node alone in its window
    opens at once (a lemon's repeat included), and so does a node with no critical event of
    its own when the fleet has no burst now (it is none of one).
    """
    window = policy.storm_window_s
    at = now if event_at is None else event_at
    nearby = {n for n, t in critical if abs(t - at) <= window} | (set() if event_at is None else {node})
    limit = storm_limit(policy, len(set(production) | nearby))
    if limit.reached(len(nearby)):
        return BurstVerdict(
            hold=f"correlated burst: {len(nearby)} nodes with critical events within "
            f"{_span(window)} ({limit.words('production nodes before the burst')}); usually a driver, "
            f"firmware or checker fault, not {len(nearby)} broken parts: an operator confirms or rejects"
        )
    if event_at is not None and len(nearby) > 1 and now < event_at + window:
        return BurstVerdict(wait_until=event_at + window)
    return BurstVerdict()


def _span(seconds: float) -> str:
    return f"{seconds / 60:g} min" if seconds >= 60 else f"{seconds:g} s"


def redact(value: Any, secrets: Iterable[str] = ()) -> Any:
    """The value with every secret masked, recursively through lists and mappings."""
    secrets = tuple(s for s in secrets if s)
    if isinstance(value, str):
        for secret in secrets:
            value = value.replace(secret, MASK)
        for pattern in _SECRET_PATTERNS:
            value = pattern.sub(
                lambda m: m.group(1) + MASK + (m.group(2) if m.lastindex and m.lastindex > 1 else ""), value
            )
        return value
    if isinstance(value, Mapping):
        return {k: redact(v, secrets) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [redact(v, secrets) for v in value]
    return value


def _iso(at: datetime | None) -> str | None:
    return at.isoformat() if at else None


def build_evidence(
    *,
    rma_reason: str,
    node: Any,
    checks: Iterable[Any],
    health_events: Iterable[Any],
    remediations: Iterable[tuple[Any, Iterable[Any]]],
    transitions: Iterable[Any],
    opened_at: datetime,
    secrets: Iterable[str] = (),
) -> dict[str, Any]:
    """The bundle, from rows of nodes, check_runs, health_events, remediation_runs/steps, node_events."""
    checks = list(checks)
    gpus: list[dict[str, Any]] = []
    firmware: dict[str, str] = {}
    driver = None
    # Newest first: the latest inventory of each kind wins.
    for c in sorted(checks, key=lambda c: c.finished_at):
        if c.kind == "nvidia-smi" and c.metrics.get("gpus"):
            gpus = [
                {k: g.get(k) for k in ("index", "name", "uuid", "serial", "bus_id", "vbios")} for g in c.metrics["gpus"]
            ]
            driver = c.metrics.get("driver_version") or driver
        if c.kind == "firmware" and isinstance(c.metrics.get("components"), dict):
            firmware.update(c.metrics["components"])
    failing = [
        {
            "check": c.check_name,
            "kind": c.kind,
            "status": c.status,
            "reason": c.reason,
            "findings": c.findings,
            "metrics": c.metrics,
            "at": _iso(c.finished_at),
            "output_truncated": c.output_truncated,
            "raw_output_excerpt": c.raw_output[-RAW_OUTPUT_EXCERPT_CHARS:],
        }
        for c in sorted(checks, key=lambda c: c.finished_at, reverse=True)
        if c.status in ("fail", "error", "warn")
    ]
    evidence = {
        "schema": EVIDENCE_SCHEMA,
        "reason": rma_reason,
        "opened_at": _iso(opened_at),
        "node": {
            "name": node.name,
            "rack": node.rack,
            "profile": node.profile,
            "address": node.address,
            "bmc_address": node.bmc_address,
            "scheduler": node.scheduler,
            "labels": dict(node.labels),
        },
        "identity": {"gpus": gpus, "driver_version": driver, "firmware": dict(sorted(firmware.items()))},
        "failing_checks": failing,
        "health_history": health_history(health_events),
        "remediation": [remediation_entry(run, steps) for run, steps in remediations],
        "transitions": [
            {
                "at": _iso(e.at),
                "from": e.from_state,
                "to": e.to_state,
                "trigger": e.trigger,
                "cause": e.cause,
                "actor": e.actor,
            }
            for e in transitions
        ],
    }
    redacted: dict[str, Any] = redact(evidence, secrets)  # a mapping comes back a dict
    return redacted


def is_fault_evidence(code: int | None, severity: str) -> bool:
    """Whether a health event tells of a fault: one with a code (an Xid), or without one but
    rated by its sender (a catalog signature, a sampled finding, an operator's report of a
    fault). An `info` note without a code tells of none."""
    return code is not None or severity in ("warning", "critical")


def health_history(events: Iterable[Any]) -> list[dict[str, Any]]:
    """The bundle's health history from the node's health_events rows since it last entered
    production (queries.health_events_in_service, every source: agent, intake, log, CLI),
    oldest first. Each critical event is kept on its own: the cause is never pushed out by
    what followed it. The repeats of a minor one (same source, code, severity and action, and
    the same words when it has no code) are one entry: when first and last seen, how often."""
    entries: dict[tuple[Any, ...], dict[str, Any]] = {}
    for k, h in enumerate(sorted(events, key=lambda h: (h.at, h.id or 0))):
        if not is_fault_evidence(h.code, h.severity):
            continue
        key: tuple[Any, ...] = (
            (k,)
            if h.severity == "critical"
            else (h.source, h.code, h.severity, h.action, h.message if h.code is None else "")
        )
        entry = entries.get(key)
        if entry is None:
            entries[key] = {
                "at": _iso(h.at),
                "last_at": _iso(h.at),
                "count": 1,
                "source": h.source,
                "code": h.code,
                "severity": h.severity,
                "action": h.action,
                "message": h.message,
            }
        else:
            entry["last_at"] = _iso(h.at)
            entry["count"] += 1
    return list(entries.values())


def remediation_entry(run: Any, steps: Iterable[Any]) -> dict[str, Any]:
    """One remediation run of the bundle, from its remediation_runs row and steps."""
    return {
        "run": run.run_key,
        "runbook": run.runbook,
        "mode": run.mode,
        "status": run.status,
        "outcome": run.outcome,
        "started_at": _iso(run.started_at),
        "finished_at": _iso(run.finished_at),
        "steps": [
            {
                "index": s.step_index,
                "name": s.name,
                "action": s.action,
                "status": s.status,
                "detail": s.detail,
                "at": _iso(s.finished_at),
            }
            for s in steps
        ],
    }


def with_current_runs(
    evidence: Mapping[str, Any], current: Mapping[str, dict[str, Any]], secrets: Iterable[str] = ()
) -> dict[str, Any]:
    """The bundle with each remediation run as it stands now (`current`: run key to
    `remediation_entry`). The bundle is written while the run that opens the RMA is still
    going, so its own entry says `running` and lacks its last steps; a run no longer
    recorded keeps what the bundle says."""
    runs = [
        redact(current[r.get("run")], secrets) if r.get("run") in current else r
        for r in evidence.get("remediation", [])
    ]
    return {**evidence, "remediation": runs}


def md_inline(value: Any) -> str:
    """A value on one Markdown line: control characters escaped, line breaks joined, and the
    characters that would start markup (a table cell's `|`, emphasis, links, code) escaped."""
    text = printable(" ".join(str(value).splitlines()), keep_newlines=False)
    return re.sub(r"([\\`*_\[\]<>|#])", r"\\\1", text)


def md_code_block(value: Any) -> str:
    """A fenced code block holding `value` verbatim (control characters escaped): the fence is
    longer than any run of backticks inside, so the content cannot close it."""
    text = printable(str(value))
    longest = max((len(run) for run in re.findall(r"`+", text)), default=0)
    fence = "`" * max(3, longest + 1)
    return f"{fence}\n{text}\n{fence}"


@cache
def _templates() -> Environment:
    from jinja2 import Environment, PackageLoader, StrictUndefined

    # Markdown, not HTML: every value goes through md_inline or md_code_block.
    env = Environment(
        loader=PackageLoader("fleetctl.remediation", "templates"),
        undefined=StrictUndefined,
        autoescape=False,
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=True,
    )
    env.filters.update(md=md_inline, code_block=md_code_block)
    return env


def render_markdown(evidence: Mapping[str, Any], rma_id: int | None = None) -> str:
    """The bundle as Markdown; a record opened without one (by hand, or before bundles were
    kept) says so rather than failing on the parts it lacks."""
    if not isinstance(evidence.get("node"), Mapping):
        return f"# RMA{f' {rma_id}' if rma_id else ''}\n\nNo evidence bundle was recorded with this RMA.\n"
    return _templates().get_template("rma.md.j2").render(e=evidence, rma_id=rma_id, failing=failing_gpus(evidence))


_GPU_WHERE = re.compile(r"\bGPU\s*(\d+)\b", re.IGNORECASE)


def failing_gpus(evidence: Mapping[str, Any]) -> set[int]:
    """The indexes of the GPUs a failing check's findings name: "GPU 3", or the GPU's PCI
    address (the bus id's last part, as nvidia-smi and the kernel log print it)."""
    gpus = evidence.get("identity", {}).get("gpus") or []
    by_bus = {str(g.get("bus_id") or "").lower()[-7:]: g.get("index") for g in gpus if g.get("bus_id")}
    found: set[int] = set()
    for check in evidence.get("failing_checks") or []:
        for finding in check.get("findings") or []:
            where = str(finding.get("where") or "")
            if named := _GPU_WHERE.search(where):
                found.add(int(named[1]))
            elif (index := by_bus.get(where.lower()[-7:])) is not None and len(where) >= 7:
                found.add(index)
    return found
