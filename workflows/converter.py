"""The data converter fleetctl's clients and worker use: Temporal's default one, with a
dataclass's field types resolved once per class instead of on every value decoded.

temporalio's JSON converter calls `typing.get_type_hints` for each dataclass value it
decodes; with `workflows.api`'s string annotations (`from __future__ import annotations`)
that evaluates every annotation again each time, most of the cost of decoding a
HealthEventInput (bench/decode.py measures it). A flood of 2,000 health-event signals
kept the worker decoding while a drain's activities waited (bench/results/agent_flood.md).

The extension point is the SDK's own: a `JSONTypeConverter` given to
`JSONPlainPayloadConverter(custom_type_converters=...)`, tried before the SDK's conversion
for every type hint. It takes dataclasses only and converts them exactly as
`temporalio.converter.value_to_type` does (same fields, same errors, unknown keys ignored,
missing ones left to the class's defaults); every field's value goes back through
`value_to_type`, so everything else (Optional, lists, dicts, datetimes, nested
dataclasses) is the SDK's conversion. Payloads are unchanged: encoding is the default.

The worker builds workflow instances, in the sandbox too, from the client's converter
class (`DataConverter.payload_converter_class`), so one `Client.connect(data_converter=
DATA_CONVERTER)` covers the client, the activities and the workflows.
"""

from __future__ import annotations

import collections.abc
import dataclasses
import functools
import typing
from typing import Any

from temporalio.converter import (
    CompositePayloadConverter,
    DataConverter,
    DefaultPayloadConverter,
    JSONPlainPayloadConverter,
    JSONTypeConverter,
    value_to_type,
)

# Bounded: the sandbox re-imports the modules it does not pass through for each workflow
# run, and their classes are new objects each time (fleetctl passes workflows.api through).
_CACHED_CLASSES = 1024


@dataclasses.dataclass(frozen=True)
class _Field:
    name: str
    hint: Any
    init: bool


@functools.lru_cache(maxsize=_CACHED_CLASSES)
def _fields(cls: type) -> tuple[_Field, ...] | None:
    """A dataclass's fields with their resolved types; None for a class the SDK does not
    convert as a dataclass (any other class, or a dataclass that is also a Mapping). Cached
    for every class a value is decoded as, so a str field costs one lookup. An annotation
    that cannot be resolved raises here, as the SDK's does, and is not cached."""
    if not dataclasses.is_dataclass(cls) or issubclass(cls, collections.abc.Mapping):
        return None
    hints = typing.get_type_hints(cls)
    return tuple(_Field(f.name, hints[f.name], f.init) for f in dataclasses.fields(cls))


class CachedDataclassConverter(JSONTypeConverter):
    """Dataclasses, as `value_to_type` converts them, with their field types cached."""

    def __init__(self) -> None:
        self._converters = (self,)

    def to_typed_value(self, hint: type, value: Any) -> Any:
        fields = _fields(hint) if isinstance(hint, type) else None
        if fields is None:
            return JSONTypeConverter.Unhandled
        if not isinstance(value, dict):
            raise TypeError(f"Cannot convert to dataclass {hint}, value is {type(value)} not dict")
        init_values: dict[str, Any] = {}
        non_init_values: dict[str, Any] = {}
        for f in fields:
            field_value = value.get(f.name, dataclasses.MISSING)
            if field_value is dataclasses.MISSING:
                continue  # the class's default, or its own TypeError for a required field
            try:
                converted = value_to_type(f.hint, field_value, self._converters)
            except Exception as err:
                raise TypeError(f"Failed converting field {f.name} on dataclass {hint}") from err
            (init_values if f.init else non_init_values)[f.name] = converted
        obj = hint(**init_values)
        for name, field_value in non_init_values.items():
            object.__setattr__(obj, name, field_value)
        return obj


class FleetctlPayloadConverter(CompositePayloadConverter):
    """Temporal's default payload converters, the JSON one with cached dataclass hints."""

    def __init__(self) -> None:
        super().__init__(
            *(
                JSONPlainPayloadConverter(custom_type_converters=[CachedDataclassConverter()])
                if isinstance(c, JSONPlainPayloadConverter)
                else c
                for c in DefaultPayloadConverter.default_encoding_payload_converters
            )
        )


DATA_CONVERTER = DataConverter(payload_converter_class=FleetctlPayloadConverter)
