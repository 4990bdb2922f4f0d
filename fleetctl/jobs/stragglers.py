"""Stragglers in production: the nodes of a running job compared with each other, from the
DCGM exporter's series that a Prometheus server already scrapes.

Pure: the PromQL each metric is asked with, the parsing of Prometheus' answer, the verdict
per node (median/MAD across the job's nodes, `checks.stragglers.find_stragglers`, as at
admission), which open findings a new verdict clears, and when a finding's drain is due.
The query itself is `fleetctl.connections.promql_client`; the periodic judge is the ProductionStragglers
workflow.

A node speaks through its slowest GPU: one throttled GPU holds back every step of a
data-parallel job, however fast the other seven are. A metric a node has no series for
gives it no verdict on that metric (never a pass): the exporter may be down, or the
field not collected.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from fleetctl.checks.stragglers import find_stragglers

FLAG_ONLY = "flag-only"
DRAIN_AT_CHECKPOINT = "drain-at-checkpoint"
POLICIES = (FLAG_ONLY, DRAIN_AT_CHECKPOINT)

# Verdicts of one node on one metric.
STRAGGLER = "straggler"
IN_LINE = "in_line"
NO_EVIDENCE = "no_evidence"  # no series for the node in the window
TOO_FEW = "too_few"  # too few of the job's nodes report the metric to compare them

# The throttle reasons that mean the hardware slowed the GPU down: HW slowdown (0x8), SW
# thermal (0x20), HW thermal (0x40), HW power brake (0x80) (NVML's
# nvmlClocksEventReasons). Idle (0x1), application clocks (0x2) and the software power cap
# (0x4, normal under a full load) are not a fault.
_SLOWDOWN_BITS = "(floor({sel} / 8) % 2 + floor({sel} / 32) % 8) > bool 0"


@dataclass(frozen=True)
class Telemetry:
    """One metric the nodes of a job are compared on."""

    name: str
    series: tuple[str, ...]  # the exporter's names for it (a field DCGM renamed lists both)
    higher_is_better: bool
    unit: str  # as the evidence says it
    # The spread never taken as smaller than this, in the series' own unit: values this
    # close are equal.
    min_spread: float
    # A bitmask series judged as the fraction of the window a slowdown bit was set.
    slowdown_bits: bool = False
    per_unit: float = 1.0  # series units per `unit` (bytes per GB)

    def say(self, value: float) -> str:
        return f"{value / self.per_unit:.4g}"

    def promql(self, nodes: Sequence[str], label: str, window_s: int) -> str:
        """Per node (by `label`), its slowest GPU's value over the last `window_s` seconds."""
        names = "|".join(re.escape(s) for s in self.series)
        hosts = "|".join(re.escape(n) for n in sorted(set(nodes)))
        sel = f'{{__name__=~"{_promql_string(names)}", {label}=~"{_promql_string(hosts)}"}}'
        slowest = "min" if self.higher_is_better else "max"
        if self.slowdown_bits:
            step = max(1, window_s // 30)
            inner = f"({_SLOWDOWN_BITS.format(sel=sel)})[{window_s}s:{step}s]"
        else:
            inner = f"{sel}[{window_s}s]"
        return f"{slowest} by ({label}) (avg_over_time({inner}))"


TELEMETRY: tuple[Telemetry, ...] = (
    # A GPU held at lower clocks (thermal, power, a firmware fault) computes slower.
    Telemetry("sm_clock", ("DCGM_FI_DEV_SM_CLOCK",), True, "MHz", 15.0),
    # Under the same load a throttled GPU draws less.
    Telemetry("power", ("DCGM_FI_DEV_POWER_USAGE",), True, "W", 10.0),
    Telemetry("gpu_temp", ("DCGM_FI_DEV_GPU_TEMP",), False, "C", 1.5),
    # A link at half rate halves the node's collective bandwidth.
    Telemetry("nvlink_tx", ("DCGM_FI_PROF_NVLINK_TX_BYTES",), True, "GB/s", 1e6, per_unit=1e9),
    Telemetry("nvlink_rx", ("DCGM_FI_PROF_NVLINK_RX_BYTES",), True, "GB/s", 1e6, per_unit=1e9),
    Telemetry("pcie_tx", ("DCGM_FI_PROF_PCIE_TX_BYTES",), True, "GB/s", 1e6, per_unit=1e9),
    Telemetry("pcie_rx", ("DCGM_FI_PROF_PCIE_RX_BYTES",), True, "GB/s", 1e6, per_unit=1e9),
    Telemetry(
        "throttled",
        ("DCGM_FI_DEV_CLOCK_THROTTLE_REASONS", "DCGM_FI_DEV_CLOCKS_EVENT_REASONS"),
        False,
        "of the window",
        0.02,
        slowdown_bits=True,
    ),
)
BY_NAME = {t.name: t for t in TELEMETRY}
_LABEL = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")


def _promql_string(text: str) -> str:
    """`text` inside a PromQL double-quoted string (re.escape's backslashes doubled)."""
    return text.replace("\\", "\\\\").replace('"', '\\"')


def check_label(label: str) -> str:
    if not _LABEL.match(label) or label.startswith("__"):
        raise ValueError(f"{label[:40]!r} is not a Prometheus label name")
    return label


class BadAnswer(ValueError):
    """Prometheus answered something that is not an instant vector by node."""


def parse_vector(body: Any, label: str) -> dict[str, float]:
    """{node: value} from /api/v1/query's JSON. Anything else than a successful instant
    vector with one sample per node is an error, never an empty (all-pass) answer. A NaN
    value is no evidence: the node is left out."""
    if not isinstance(body, dict) or body.get("status") != "success":
        error = body.get("error", "") if isinstance(body, dict) else ""
        raise BadAnswer(f"Prometheus did not answer success: {str(error)[:200]!r}")
    data = body.get("data")
    if not isinstance(data, dict) or data.get("resultType") != "vector" or not isinstance(data.get("result"), list):
        raise BadAnswer("Prometheus' answer is not an instant vector")
    values: dict[str, float] = {}
    for sample in data["result"]:
        metric = sample.get("metric") if isinstance(sample, dict) else None
        value = sample.get("value") if isinstance(sample, dict) else None
        node = metric.get(label) if isinstance(metric, dict) else None
        if not isinstance(node, str) or not node:
            raise BadAnswer(f"a sample without its {label} label")
        if not (isinstance(value, list) and len(value) == 2 and isinstance(value[1], str)):
            raise BadAnswer(f"{node}: a sample without a [time, value] pair")
        try:
            number = float(value[1])
        except ValueError:
            raise BadAnswer(f"{node}: {value[1][:40]!r} is not a number") from None
        if node in values:
            raise BadAnswer(f"{node}: two samples for one node (is {label} the node's name?)")
        if not math.isnan(number):
            values[node] = number
    return values


@dataclass(frozen=True)
class MetricVerdict:
    node: str
    metric: str
    verdict: str  # STRAGGLER, IN_LINE, NO_EVIDENCE or TOO_FEW
    value: float | None
    median: float | None
    robust_z: float | None
    evidence: str


def judge_job(
    job_id: str, nodes: Sequence[str], telemetry: Mapping[str, Mapping[str, float]], threshold: float, min_nodes: int
) -> list[MetricVerdict]:
    """Every node of the job on every metric in `telemetry` ({metric: {node: value}}, the
    nodes with a series): a straggler when its robust z is beyond `threshold` on the bad side."""
    verdicts: list[MetricVerdict] = []
    for name, by_node in telemetry.items():
        spec = BY_NAME[name]
        values = {n: by_node[n] for n in nodes if n in by_node and math.isfinite(by_node[n])}
        if len(values) < min_nodes:
            words = (
                f"job {job_id}: only {len(values)} of its {len(nodes)} nodes report {name}, "
                f"need {min_nodes} to compare them; nobody flagged"
            )
            verdicts += [
                MetricVerdict(
                    n,
                    name,
                    TOO_FEW if n in values else NO_EVIDENCE,
                    values.get(n),
                    None,
                    None,
                    words if n in values else _no_series(spec, n),
                )
                for n in nodes
            ]
            continue
        judged = find_stragglers(
            values, spec.higher_is_better, threshold, min_peers=min_nodes, min_spread=spec.min_spread
        )
        for n in nodes:
            if n not in values:
                verdicts.append(MetricVerdict(n, name, NO_EVIDENCE, None, None, None, _no_series(spec, n)))
                continue
            v = judged[n]
            # find_stragglers compares (and so has a median) given min_peers values, as here.
            assert v.median is not None
            evidence = (
                f"{name} {spec.say(v.value)} {spec.unit} (slowest GPU) vs job {job_id} median "
                f"{spec.say(v.median)} over {len(values)} nodes, robust z {v.robust_z:.1f}"
            )
            verdicts.append(
                MetricVerdict(n, name, STRAGGLER if v.straggler else IN_LINE, v.value, v.median, v.robust_z, evidence)
            )
    return verdicts


def unjudged(job_id: str, verdicts: Iterable[MetricVerdict], named: int = 3) -> list[str]:
    """What could not be judged in one job, per metric, in words: the nodes without a series
    (a Hostname that is not the node's name, an exporter down, a field not collected), or
    too few nodes to compare. An operator reads these to tell "nothing wrong" from "not seen"."""
    missing: dict[str, list[str]] = {}
    too_few: dict[str, str] = {}
    for v in verdicts:
        if v.verdict == NO_EVIDENCE:
            missing.setdefault(v.metric, []).append(v.node)
        elif v.verdict == TOO_FEW:
            too_few.setdefault(v.metric, v.evidence)
    lines = []
    for metric in sorted(set(missing) | set(too_few)):
        if metric in too_few:
            lines.append(too_few[metric])
        elif metric in missing:
            nodes = missing[metric]
            more = f" and {len(nodes) - named} more" if len(nodes) > named else ""
            lines.append(f"job {job_id}: no evidence on {metric} for {', '.join(nodes[:named])}{more}")
    return lines


def _no_series(spec: Telemetry, node: str) -> str:
    return f"no evidence: no {' or '.join(spec.series)} series for {node} in the window"


@dataclass(frozen=True)
class OpenFinding:
    id: int
    job_id: str
    node: str
    metric: str


def reconcile(
    job_id: str, open_findings: Iterable[OpenFinding], verdicts: Iterable[MetricVerdict]
) -> tuple[list[MetricVerdict], list[tuple[int, MetricVerdict]]]:
    """(new findings, cleared findings) of one job: a straggler verdict without an open
    finding is new; an open finding cleared only by positive evidence that the node is back
    in line (no series, or too few nodes to compare, leaves it open: nothing was seen)."""
    known = {(f.node, f.metric): f.id for f in open_findings if f.job_id == job_id}
    new, cleared = [], []
    for v in verdicts:
        finding = known.get((v.node, v.metric))
        if v.verdict == STRAGGLER and finding is None:
            new.append(v)
        elif v.verdict == IN_LINE and finding is not None:
            cleared.append((finding, v))
    return new, cleared


def drain_due(
    found_at: datetime,
    restarts_at_finding: int,
    job_state: str,
    last_checkpoint_at: datetime | None,
    restart_count: int,
) -> str | None:
    """Why an open finding's node may be drained now without costing its job work (None:
    not yet): the job wrote a checkpoint after the finding, or was restarted, or ended."""
    if last_checkpoint_at is not None and last_checkpoint_at > found_at:
        return f"the job checkpointed at {last_checkpoint_at.isoformat()}, after the finding"
    if restart_count > restarts_at_finding:
        return "the job was restarted since the finding"
    if job_state != "running":
        return f"the job is no longer running ({job_state})"
    return None
