"""fleetctl's data converter (workflows/converter.py) decodes every payload class exactly as
Temporal's default converter does, values and errors alike, and encodes the same bytes.

Table-driven over the real classes: every dataclass of workflows.api and fleetctl.nodes.capacity
(the classes that cross Temporal), each filled by its own field types (Optional, lists,
dicts, nested dataclasses, datetimes), then bad payloads of the hot ones."""

from __future__ import annotations

import dataclasses
import enum
import importlib
import inspect
import json
import pkgutil
import typing
from datetime import UTC, datetime
from types import NoneType, UnionType
from typing import Any

import pytest
from temporalio.converter import DataConverter

from fleetctl.nodes import capacity
from fleetctl.workflows import api
from fleetctl.workflows.converter import DATA_CONVERTER, _fields

DEFAULT = DataConverter.default.payload_converter
CACHED = DATA_CONVERTER.payload_converter

# Every module of workflows.api (one per domain) and the guard's pure dataclasses.
PAYLOAD_MODULES = (
    *(importlib.import_module(f"{api.__name__}.{m.name}") for m in pkgutil.iter_modules(api.__path__)),
    capacity,
)
CLASSES = sorted(
    (
        c
        for module in PAYLOAD_MODULES
        for c in vars(module).values()
        if inspect.isclass(c) and dataclasses.is_dataclass(c) and c.__module__ == module.__name__
    ),
    key=lambda c: f"{c.__module__}.{c.__name__}",
)


def _sample(hint: Any, seed: int, none: bool) -> Any:
    """A value of type `hint`; `none` picks None for every Optional (the other branch)."""
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin in (UnionType, typing.Union):
        return None if none else _sample(next(a for a in args if a is not NoneType), seed, none)
    if origin is list:
        return [_sample(args[0], seed + i, none) for i in range(2)] if args else [seed, "x"]
    if origin is dict:
        return {f"k{seed}": _sample(args[1], seed, none), f"j{seed}": _sample(args[1], seed + 1, none)}
    if hint is list:
        return [seed, "x", {"nested": None}]
    if hint is dict:
        return {"kind": "xid", "code": seed, "nested": {"list": [1, 2.5, None]}}
    if hint is Any:
        return {"any": [seed, "x", None]}
    if hint is str:
        return f"s{seed}"
    if hint is bool:
        return seed % 2 == 0
    if hint is int:
        return seed
    if hint is float:
        return seed + 0.25
    if hint is datetime:
        return datetime(2026, 12, 1, 9, 30, seed % 60, tzinfo=UTC)
    if dataclasses.is_dataclass(hint):
        return _instance(hint, seed, none)
    if isinstance(hint, type) and issubclass(hint, enum.Enum):
        members = list(hint)
        return members[seed % len(members)]
    raise AssertionError(f"no sample for {hint!r}: teach _sample the new field type")


def _instance(cls: type, seed: int = 1, none: bool = False):
    hints = typing.get_type_hints(cls)
    return cls(
        **{f.name: _sample(hints[f.name], seed + i, none) for i, f in enumerate(dataclasses.fields(cls)) if f.init}
    )


def test_the_table_holds_the_payload_classes() -> None:
    names = {c.__name__ for c in CLASSES}
    assert {
        "HealthEventInput",
        "HealthEventBatch",
        "NodeLifecycleState",
        "CapacityGuardState",
        "RemovalRequest",
        "FleetSnapshot",
        "GuardPolicy",
        "RunStart",
    } <= names
    assert len(CLASSES) > 60


@pytest.mark.parametrize("none", [False, True], ids=["values", "optionals-none"])
@pytest.mark.parametrize("cls", CLASSES, ids=lambda c: c.__name__)
def test_round_trip_equals_the_default_converter(cls: type, none: bool) -> None:
    value = _instance(cls, none=none)
    payloads = DEFAULT.to_payloads([value])
    assert CACHED.to_payloads([value]) == payloads  # same bytes: histories and other SDKs see no change
    (expected,) = DEFAULT.from_payloads(payloads, [cls])
    (got,) = CACHED.from_payloads(payloads, [cls])
    assert got == expected == value
    assert type(got) is cls


@pytest.mark.parametrize("cls", CLASSES, ids=lambda c: c.__name__)
def test_missing_fields_take_defaults_and_unknown_ones_are_ignored(cls: type) -> None:
    """A recorded payload from before a field was added, and one from after a field was dropped."""
    (payload,) = DEFAULT.to_payloads([_instance(cls)])
    data = json.loads(payload.data)
    required = {
        f.name
        for f in dataclasses.fields(cls)
        if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
    }
    old = {k: v for k, v in data.items() if k in required}
    old["a_field_from_the_future"] = {"x": 1}
    payloads = DEFAULT.to_payloads([old])
    assert CACHED.from_payloads(payloads, [cls]) == DEFAULT.from_payloads(payloads, [cls])


def _failure(converter, payload_value: Any, cls: type) -> list[tuple[type, str]]:
    """The exception a decode raises, with its chain of causes (type, message)."""
    with pytest.raises(Exception) as caught:
        converter.from_payloads(DEFAULT.to_payloads([payload_value]), [cls])
    chain, exc = [], caught.value
    while exc is not None:
        chain.append((type(exc), str(exc)))
        exc = exc.__cause__
    return chain


EVENT = {"node": "gpu-7", "source": "xid", "code": 79, "message": "m", "actor": "a", "event_id": "e", "at": 1.5}
BAD = [
    ("not a dict", api.HealthEventInput, ["gpu-7", "xid"]),
    ("a required field missing", api.HealthEventInput, {"source": "xid"}),
    ("code not a number", api.HealthEventInput, {**EVENT, "code": "79"}),
    ("at a string", api.HealthEventInput, {**EVENT, "at": "yesterday"}),
    ("bool field an int", api.HealthEventInput, {**EVENT, "at_from_record": 1}),
    ("an event in a burst bad", api.HealthEventBatch, {"node": "gpu-7", "events": [EVENT, {**EVENT, "code": [1]}]}),
    ("burst events not a list", api.HealthEventBatch, {"node": "gpu-7", "events": 5}),
    (
        "a queued item's event bad",
        api.NodeLifecycleState,
        {"node": "gpu-7", "work": [{"kind": "health_event", "event": {**EVENT, "node": None}}]},
    ),
    ("a recent request bad", api.NodeLifecycleState, {"node": "gpu-7", "recent_requests": {"r": {"node": "x"}}}),
    ("a verdict bad", api.HealthEventBatchResult, {"acted": [{"node": "gpu-7", "drain_now": "yes"}]}),
    (
        "a pending grant bad",
        api.CapacityGuardState,
        {"pending": {"gpu-7": {"rack": "r", "at": None, "state_version": 1}}},
    ),
    ("the policy not a dict", api.CapacityGuardState, {"policy": 0.1}),
    ("a nested dataclass missing", api.RecordedTransition, {"version": 1}),
    (
        "a datetime not ISO 8601",
        api.RunStart,
        {
            "run_key": "k",
            "node": "n",
            "runbook": "r",
            "event": {},
            "mode": "live",
            "actor": "a",
            "started_at": "yesterday",
        },
    ),
    ("a rack count bad", capacity.FleetSnapshot, {"racks": {"r1": {"serving": "many"}}}),
]


@pytest.mark.parametrize(("case", "cls", "bad"), BAD, ids=[b[0] for b in BAD])
def test_bad_data_raises_what_the_default_converter_raises(case: str, cls: type, bad: Any) -> None:
    expected = _failure(DEFAULT, bad, cls)
    assert _failure(CACHED, bad, cls) == expected


def test_type_hints_are_resolved_once_per_class() -> None:
    """The point of the converter: decoding a class again does not resolve its hints again."""
    payloads = DEFAULT.to_payloads([_instance(api.HealthEventInput)])
    CACHED.from_payloads(payloads, [api.HealthEventInput])
    resolved = _fields.cache_info().misses
    for _ in range(3):
        CACHED.from_payloads(payloads, [api.HealthEventInput])
    assert _fields.cache_info().misses == resolved


def test_an_unresolvable_annotation_fails_as_in_the_default_converter() -> None:
    @dataclasses.dataclass
    class Broken:
        x: NoSuchType  # noqa: F821 - the point

    for _ in range(2):  # not cached: the second decode fails the same way
        assert _failure(CACHED, {"x": 1}, Broken) == _failure(DEFAULT, {"x": 1}, Broken)
