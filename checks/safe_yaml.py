"""The one YAML loader for every file an operator hands fleetctl: inventory, runbooks, the
config file, firmware baselines, check suites.

It lives in `checks` (which imports nothing of fleetctl), the lowest layer, so that the check
suites and every fleetctl module can use it; importing it costs only PyYAML.

PyYAML's safe loader is safe against code execution but not against size: a few hundred
bytes of nested aliases (a "billion laughs") expand to gigabytes, and YAML 1.1's implicit
types rename values (`0123` is 83, `0x1F` is 31, `no` is False). This loader:
- refuses aliases (fleetctl's files never need them) and bounds the file size and nesting;
- resolves plain scalars by YAML 1.2's core schema: decimal integers without leading zeros,
  decimal floats, `true`/`false`, `null`/`~`; everything else stays a string;
- never quotes the document in an error beyond a short, cut excerpt.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, ClassVar

import yaml

# Generous for any hand-written inventory (about 10k nodes) or runbook.
MAX_BYTES = 4 * 1024 * 1024
MAX_DEPTH = 64
EXCERPT_CHARS = 60


class YamlRefused(ValueError):
    """The file is not YAML fleetctl accepts; the message is one line naming why."""


def excerpt(value: Any, limit: int = EXCERPT_CHARS) -> str:
    """`repr(value)` cut to `limit` characters, for quoting input in an error line."""
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


class _Loader(yaml.SafeLoader):
    # PyYAML keeps the resolvers on the class (add_implicit_resolver copies them into the
    # class's own dict); its stubs declare them an instance attribute.
    yaml_implicit_resolvers: ClassVar[dict[Any, Any]] = {}  # type: ignore[misc]

    def compose_node(self, parent: yaml.Node | None, index: int) -> yaml.Node | None:
        if self.check_event(yaml.AliasEvent):
            event = self.peek_event()  # type: ignore[no-untyped-call]  # PyYAML's stubs leave it unannotated
            raise YamlRefused(f"YAML aliases are not allowed (line {event.start_mark.line + 1})")
        self._depth = getattr(self, "_depth", 0) + 1
        try:
            if self._depth > MAX_DEPTH:
                raise YamlRefused(f"YAML nested deeper than {MAX_DEPTH} levels")
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1


# YAML 1.2's core schema (https://yaml.org/spec/1.2.2/#1032-tag-resolution) in place of 1.1's,
# and stricter: a number with a leading zero (`0123`) stays a string, as names like it must.
for _tag, _pattern, _first in (
    ("tag:yaml.org,2002:bool", r"^(?:true|True|TRUE|false|False|FALSE)$", "tTfF"),
    ("tag:yaml.org,2002:int", r"^[-+]?(?:0|[1-9][0-9]*)$", "-+0123456789"),
    (
        "tag:yaml.org,2002:float",
        r"^[-+]?(?:\.[0-9]+|(?:0|[1-9][0-9]*)(?:\.[0-9]*(?:[eE][-+]?[0-9]+)?|[eE][-+]?[0-9]+))$",
        "-+.0123456789",
    ),
    ("tag:yaml.org,2002:null", r"^(?:~|null|Null|NULL|)$", ["~", "n", "N", ""]),
):
    _Loader.add_implicit_resolver(_tag, re.compile(_pattern), list(_first))


def loads(text: str, source: str = "<yaml>") -> Any:
    """The document in `text`; YamlRefused (prefixed with `source`) when it is refused."""
    if len(text) > MAX_BYTES:
        raise YamlRefused(f"{source}: larger than {MAX_BYTES} bytes")
    try:
        return yaml.load(text, Loader=_Loader)
    except YamlRefused as exc:
        raise YamlRefused(f"{source}: {exc}") from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}" if mark else ""
        raise YamlRefused(f"{source}: not valid YAML{where}") from None
    except RecursionError:
        raise YamlRefused(f"{source}: YAML nested too deeply") from None


def read_text(path: str | Path, max_bytes: int = MAX_BYTES) -> str:
    """A text file an operator named, bounded; YamlRefused says in one line why it cannot be read
    (missing, a directory, too large, not UTF-8 text)."""
    path = Path(path)
    try:
        with path.open("rb") as f:
            data = f.read(max_bytes + 1)
    except OSError as exc:
        raise YamlRefused(f"{path}: cannot read ({exc.strerror or exc.__class__.__name__})") from None
    if len(data) > max_bytes:
        raise YamlRefused(f"{path}: larger than {max_bytes} bytes")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise YamlRefused(f"{path}: not UTF-8 text") from None
    if "\x00" in text:
        raise YamlRefused(f"{path}: not text (contains NUL bytes)")
    return text


def load_file(path: str | Path) -> Any:
    return loads(read_text(path), str(path))
