"""Payload decoding: microseconds to decode fleetctl's hot payloads with fleetctl's data
converter (workflows/converter.py, dataclass type hints cached per class) against
Temporal's default converter, in the same process, rounds alternated.

The payloads are the ones a health-event flood and the drain after it decode: the signal
(HealthEventInput), a burst of 200 of them in one activity input, the burst's answer, the
node workflow's state with 200 queued events (continue-as-new, queries), the transition
request and record, the guard's state, snapshot and decision. Both converters must decode
each payload to equal values, or the benchmark refuses to report.

The alternative, annotations that are not strings in workflows/api/, is measured on
HealthEventInput alone: the same class rebuilt with its evaluated types (make_dataclass),
decoded by the default converter.
"""

from __future__ import annotations

import dataclasses
import statistics
import time
import typing
from typing import Any

from bench.harness import CannotMeasure, rounded, summary

ROUNDS, ROUNDS_FULL = 7, 21
ROUND_SECONDS = 0.05  # each converter decodes each payload for about this long per round


def _payloads() -> dict[str, tuple[type, Any]]:
    from fleetctl.nodes.capacity import FleetSnapshot, GuardPolicy, RackCounts, RemovalDecision
    from fleetctl.workflows import api

    def event(i: int, code: int = 13) -> api.HealthEventInput:
        return api.HealthEventInput(
            "gpu-7",
            "xid",
            code,
            f"NVRM: Xid (PCI:0000:2b:00): {code}, pid={i}",
            "agent",
            f"kmsg/{i}",
            1764547200.0 + i,
            1764547201.0 + i,
            "warning",
            True,
        )

    burst = [event(i) for i in range(200)]
    return {
        "HealthEventInput": (api.HealthEventInput, event(0, 79)),
        "HealthEventBatch (200 events)": (api.HealthEventBatch, api.HealthEventBatch("gpu-7", burst)),
        "HealthEventBatchResult": (
            api.HealthEventBatchResult,
            api.HealthEventBatchResult(
                [api.HealthEventVerdict("gpu-7", "critical", "drain", True, True, "XID 79", 199)], [""] * 200, "XID 13"
            ),
        ),
        "NodeLifecycleState (200 queued events)": (
            api.NodeLifecycleState,
            api.NodeLifecycleState(
                "gpu-7",
                "production",
                12,
                {
                    f"r{i}": api.TransitionResult("gpu-7", "burn_in", "production", i, "admit", "alice")
                    for i in range(20)
                },
                [api.WorkItem("health_event", "agent", event=e, fault_seen_at=e.at) for e in burst],
            ),
        ),
        "TransitionRequest": (
            api.TransitionRequest,
            api.TransitionRequest(
                trigger="drain",
                actor="agent",
                actor_kind="automation",
                cause="XID 79",
                request_id="k/drain",
                event={"kind": "xid", "code": 79},
                node="gpu-7",
                grant="g",
            ),
        ),
        "TransitionRecord": (
            api.TransitionRecord,
            api.TransitionRecord(
                "gpu-7",
                "production",
                "draining",
                "drain",
                "XID 79",
                "agent",
                "automation",
                "node/gpu-7",
                "run",
                12,
                "k",
            ),
        ),
        "RecordedTransition": (
            api.RecordedTransition,
            api.RecordedTransition(13, api.NodeFacts("gpu-7", "r1", "h100-sxm", "slurm", "draining", "default")),
        ),
        "CapacityGuardState": (
            api.CapacityGuardState,
            api.CapacityGuardState(
                "default",
                GuardPolicy(),
                recent_failures={f"gpu-{i}": 1.0 * i for i in range(10)},
                pending={f"gpu-{i}": api.PendingGrant("r1", 1.0, 3) for i in range(10)},
            ),
        ),
        "FleetSnapshot (32 racks)": (FleetSnapshot, FleetSnapshot({f"r{i}": RackCounts(32, 1, 31) for i in range(32)})),
        "RemovalDecision": (RemovalDecision, RemovalDecision("gpu-7", True, "critical", grant="g")),
    }


def _with_evaluated_annotations(cls: type) -> type:
    """`cls` as if its module did not use `from __future__ import annotations` (flat classes:
    a nested dataclass would keep its own string annotations)."""
    hints = typing.get_type_hints(cls)
    return dataclasses.make_dataclass(
        cls.__name__,
        [
            (f.name, hints[f.name], dataclasses.field(default=f.default, default_factory=f.default_factory))
            for f in dataclasses.fields(cls)
        ],
    )


def _per_call_us(decode, payloads, hint: type) -> float:
    calls, started = 0, time.perf_counter()
    while True:
        decode(payloads, [hint])
        calls += 1
        elapsed = time.perf_counter() - started
        if elapsed >= ROUND_SECONDS:
            return elapsed / calls * 1e6


def run(full: bool) -> dict:
    from temporalio.converter import DataConverter

    from fleetctl.workflows.api import HealthEventInput
    from fleetctl.workflows.converter import DATA_CONVERTER

    default, cached = DataConverter.default.payload_converter, DATA_CONVERTER.payload_converter
    rounds = ROUNDS_FULL if full else ROUNDS
    figures, samples = {}, {}
    for name, (hint, value) in _payloads().items():
        payloads = default.to_payloads([value])
        if cached.to_payloads([value]) != payloads:
            raise CannotMeasure(f"{name}: fleetctl's converter encodes a different payload")
        expected = default.from_payloads(payloads, [hint])
        if expected != [value] or cached.from_payloads(payloads, [hint]) != expected:
            raise CannotMeasure(f"{name}: the converters decode different values")
        times: dict[str, list[float]] = {"default": [], "cached": []}
        for _ in range(rounds):
            times["default"].append(_per_call_us(default.from_payloads, payloads, hint))
            times["cached"].append(_per_call_us(cached.from_payloads, payloads, hint))
        d, c = statistics.median(times["default"]), statistics.median(times["cached"])
        figures[name] = {
            "bytes": len(payloads[0].data),
            "default_us": round(d, 1),
            "cached_us": round(c, 1),
            "default_over_cached": round(d / c, 2),
        }
        samples[name] = {k: rounded(v, 2) for k, v in times.items()}
    evaluated = _with_evaluated_annotations(HealthEventInput)
    payloads = default.to_payloads([_payloads()["HealthEventInput"][1]])
    if [dataclasses.asdict(v) for v in default.from_payloads(payloads, [evaluated])] != [
        dataclasses.asdict(v) for v in default.from_payloads(payloads, [HealthEventInput])
    ]:
        raise CannotMeasure("HealthEventInput rebuilt with evaluated annotations decodes differently")
    times = [_per_call_us(default.from_payloads, payloads, evaluated) for _ in range(rounds)]
    figures["HealthEventInput"]["default_evaluated_annotations_us"] = round(statistics.median(times), 1)
    samples["HealthEventInput"]["default_evaluated_annotations"] = rounded(times, 2)
    return {
        "figures": figures,
        "samples": samples,
        "rounds": rounds,
        "summary_default_over_cached": summary([f["default_over_cached"] for f in figures.values()], 2),
    }
