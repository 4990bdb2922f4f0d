"""Firmware baselines, drift and roll-out plans. Pure: no I/O beyond reading a baseline file.

A baseline says, per GPU profile, which version each firmware component must run and how
to update it. Component keys are shell-style patterns over the names the firmware parsers
(checks.firmware) report, so one entry covers all eight GPUs:

    name: fleet-2026-12
    profiles:
      h100-sxm:
        "GPU * VBIOS":
          version: 96.00.99.00.01
          update:
            redfish: {image: "https://fw.example/vbios-96.00.99.00.01.fwpkg"}
        "ConnectX-7 *":
          version: 28.39.1002
          update:
            ssh: "mlxfwmanager -u -y -i {{ image }}"
            image: /opt/firmware/fw-ConnectX7-28.39.1002.bin

An SSH command template is split into words first and each word is rendered in the runbook
sandbox afterwards, so a value is always exactly one argument: the executor quotes each one
and no value can add a word, a redirection or a second command.
"""

from __future__ import annotations

import fnmatch
import math
import re
import shlex
import unicodedata
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from fleetctl.checks.safe_yaml import YamlRefused, loads, read_text
from fleetctl.remediation.sandbox import TemplateRefused, check_template, render


# The firmware image URL a BMC is told to fetch is checked where a baseline is read and again
# before the BMC is asked (fleetctl.bmc.redfish).
def validate_image_uri(image_uri: str) -> str:
    """Check a firmware image URL before a BMC fetches it; returns its TransferProtocol.

    The URL is not repeated in the error: it may carry the image server's credentials.
    """
    if any(char.isspace() or unicodedata.category(char).startswith("C") for char in image_uri):
        raise ValueError("firmware image URL must not contain whitespace or control characters")
    parts = urlsplit(image_uri)
    if parts.scheme.lower() not in ("http", "https"):
        raise ValueError(f"firmware image URL must use http or https, not {parts.scheme or 'no scheme'}")
    if not parts.hostname:
        raise ValueError("firmware image URL has no host")
    return parts.scheme.upper()


class BaselineError(ValueError):
    """A malformed baseline: file, profile, component and reason on one line."""


@dataclass(frozen=True)
class UpdatePath:
    method: str  # "redfish" or "ssh"
    image: str = ""
    targets: tuple[str, ...] = ()  # Redfish SimpleUpdate Targets
    command: tuple[str, ...] = ()  # SSH: the template split into words, each word a template


@dataclass(frozen=True)
class ComponentSpec:
    pattern: str
    version: str
    update: UpdatePath | None = None


@dataclass(frozen=True)
class Baseline:
    name: str
    profiles: dict[str, tuple[ComponentSpec, ...]]

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "profiles": {
                profile: [
                    {
                        "pattern": c.pattern,
                        "version": c.version,
                        "update": None
                        if c.update is None
                        else {
                            "method": c.update.method,
                            "image": c.update.image,
                            "targets": list(c.update.targets),
                            "command": list(c.update.command),
                        },
                    }
                    for c in specs
                ]
                for profile, specs in self.profiles.items()
            },
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Baseline:
        return cls(
            d["name"],
            {
                profile: tuple(
                    ComponentSpec(
                        c["pattern"],
                        c["version"],
                        None
                        if c["update"] is None
                        else UpdatePath(
                            c["update"]["method"],
                            c["update"]["image"],
                            tuple(c["update"]["targets"]),
                            tuple(c["update"]["command"]),
                        ),
                    )
                    for c in specs
                )
                for profile, specs in d["profiles"].items()
            },
        )


def parse_baseline(text: str, source: str = "<baseline>", known_profiles: set[str] | None = None) -> Baseline:
    def fail(reason: str) -> BaselineError:
        return BaselineError(f"{source}: {reason}")

    try:
        doc = loads(text, source)
    except YamlRefused as exc:
        raise BaselineError(str(exc)) from None
    if not isinstance(doc, dict) or not isinstance(doc.get("profiles"), dict) or not doc["profiles"]:
        raise fail("expected 'name' and a non-empty 'profiles' mapping")
    name = doc.get("name")
    if not isinstance(name, str) or not name.strip():
        raise fail("name must be a non-empty string")
    profiles: dict[str, tuple[ComponentSpec, ...]] = {}
    for profile, components in doc["profiles"].items():
        if known_profiles is not None and profile not in known_profiles:
            raise fail(f"unknown profile {profile!r} (known: {', '.join(sorted(known_profiles))})")
        if not isinstance(components, dict) or not components:
            raise fail(f"{profile}: expected a mapping of component -> version")
        specs = []
        for pattern, entry in components.items():
            try:
                specs.append(_component(str(pattern), entry))
            except (ValueError, TemplateRefused) as exc:
                raise fail(f"{profile}: {pattern}: {exc}") from None
        profiles[str(profile)] = tuple(specs)
    return Baseline(name.strip(), profiles)


def _component(pattern: str, entry: Any) -> ComponentSpec:
    if isinstance(entry, (str, int, float)) and not isinstance(entry, bool):
        return ComponentSpec(pattern, str(entry))
    if not isinstance(entry, dict) or "version" not in entry or set(entry) - {"version", "update"}:
        raise ValueError("expected a version, or a mapping with version and update")
    update = entry.get("update")
    if update is None:
        return ComponentSpec(pattern, str(entry["version"]))
    if not isinstance(update, dict):
        raise ValueError("update must be a mapping")
    methods = {"redfish", "ssh"} & set(update)
    if len(methods) != 1 or set(update) - {"redfish", "ssh", "image"}:
        raise ValueError("update needs exactly one of redfish or ssh (and optionally image)")
    if "redfish" in update:
        r = update["redfish"]
        if not isinstance(r, dict) or not isinstance(r.get("image"), str) or set(r) - {"image", "targets"}:
            raise ValueError("redfish update needs image (and optionally targets)")
        validate_image_uri(r["image"])
        path = UpdatePath("redfish", r["image"], tuple(str(t) for t in r.get("targets", [])))
    else:
        command = update["ssh"]
        words = split_template(command) if isinstance(command, str) else command
        if not isinstance(words, list) or not words or not all(isinstance(w, str) for w in words):
            raise ValueError("ssh update must be a command template (a string or a list of words)")
        for word in words:
            check_template(word)
        path = UpdatePath("ssh", str(update.get("image", "")), command=tuple(words))
    return ComponentSpec(pattern, str(entry["version"]), path)


_TEMPLATE_PART = re.compile(r"\{\{.*?\}\}|\{%.*?%\}", re.S)


def split_template(command: str) -> list[str]:
    """Split a command template into words the way a shell would, keeping `{{ ... }}` whole."""
    parts: list[str] = []

    def stash(m: re.Match[str]) -> str:
        parts.append(m.group(0))
        return f"\x00{len(parts) - 1}\x00"

    words = shlex.split(_TEMPLATE_PART.sub(stash, command))
    return [re.sub("\x00(\\d+)\x00", lambda m: parts[int(m[1])], w) for w in words]


def load_baseline(path: str | Path, known_profiles: set[str] | None = None) -> Baseline:
    try:
        text = read_text(path)
    except YamlRefused as exc:
        raise BaselineError(str(exc)) from None
    return parse_baseline(text, str(path), known_profiles)


# ---- drift ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class ComponentDrift:
    pattern: str
    component: str | None  # None: no reported component matches the pattern
    expected: str
    actual: str | None


@dataclass(frozen=True)
class NodeDrift:
    node: str
    profile: str
    status: str  # "ok", "drift", "unknown" (no inventory), "no_baseline" (profile not in it)
    drifts: tuple[ComponentDrift, ...] = ()

    @property
    def component_count(self) -> int:
        return len(self.drifts)


def drift(specs: Sequence[ComponentSpec], components: Mapping[str, str]) -> list[ComponentDrift]:
    """Every component off its baseline version, and every pattern no component matches."""
    found: list[ComponentDrift] = []
    for spec in specs:
        matched = sorted(name for name in components if fnmatch.fnmatchcase(name, spec.pattern))
        if not matched:
            found.append(ComponentDrift(spec.pattern, None, spec.version, None))
        found += [
            ComponentDrift(spec.pattern, name, spec.version, components[name])
            for name in matched
            if components[name] != spec.version
        ]
    return found


def node_drift(baseline: Baseline, node: str, profile: str, components: Mapping[str, str] | None) -> NodeDrift:
    specs = baseline.profiles.get(profile)
    if specs is None:
        return NodeDrift(node, profile, "no_baseline")
    if not components:
        return NodeDrift(node, profile, "unknown")
    found = drift(specs, components)
    return NodeDrift(node, profile, "drift" if found else "ok", tuple(found))


def updates_for(baseline: Baseline, profile: str, drifts: Sequence[ComponentDrift]) -> list[ComponentSpec]:
    """The baseline entries to apply, once each (one VBIOS package updates all eight GPUs)."""
    by_pattern = {c.pattern: c for c in baseline.profiles.get(profile, ())}
    return [by_pattern[p] for p in dict.fromkeys(d.pattern for d in drifts)]


def update_argv(spec: ComponentSpec, context: Mapping[str, Any]) -> list[str]:
    """The SSH update command: each word rendered on its own, so each value stays one argument."""
    assert spec.update is not None and spec.update.method == "ssh"
    values = {"image": spec.update.image, "version": spec.version, "component": spec.pattern, **context}
    return [render(word, values) for word in spec.update.command]


# ---- roll-out plans -------------------------------------------------------------------------

_BATCH = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(%)?\s*\Z")


def batch_size(spec: str | int, total: int) -> int:
    """'5%' of the fleet (at least one node) or a node count."""
    m = _BATCH.match(str(spec))
    if not m or float(m[1]) <= 0:
        raise ValueError(f"batch must be a node count or a percentage like 5%, not {spec!r}")
    if m[2]:
        return max(1, math.ceil(total * float(m[1]) / 100))
    if not float(m[1]).is_integer():
        raise ValueError(f"batch {spec!r}: a node count must be whole")
    return int(float(m[1]))


def plan_batches(nodes: Sequence[str], canary: int, batch: str | int) -> list[list[str]]:
    """Canary nodes alone first, then batches; a percentage is of all nodes in the roll-out."""
    if canary < 0:
        raise ValueError("canary must be 0 or more")
    nodes = list(nodes)
    size = batch_size(batch, len(nodes))
    batches = [nodes[:canary]] if canary and nodes else []
    rest = nodes[canary:]
    batches += [rest[i : i + size] for i in range(0, len(rest), size)]
    return batches


@dataclass
class RolloutTally:
    """Failures since the roll-out last (re)started, which the halt compares with max_failures."""

    max_failures: int
    failures: int = 0
    halted: bool = False
    failed_nodes: list[str] = field(default_factory=list)

    def record(self, node: str, ok: bool) -> None:
        if not ok:
            self.failures += 1
            self.failed_nodes.append(node)
            if self.failures >= self.max_failures:
                self.halted = True

    def resume(self) -> None:
        self.failures, self.halted = 0, False
