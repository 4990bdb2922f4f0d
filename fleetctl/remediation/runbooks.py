"""Remediation runbooks: the YAML model and its loading and validation. Pure: no I/O beyond
reading the runbook files. Which runbook handles an event is `matching`; the templates run in
`sandbox`; what each action takes is `actions`; the lemon rule is `lemons`.

A runbook names the events it handles and an ordered list of steps:

    name: xid-79-fallen-off-bus
    description: ...
    priority: 50                      # the highest-priority match wins; ties by name
    match:
      xid: [79]                       # kernel-log XID codes
      checks:                         # check results: name, statuses, a finding regex
        - {name: nvidia-smi-query, status: [fail], finding: "row remapping failed"}
      stragglers: [nvlink_tx]         # production stragglers, by the metric that found them
      fallback: true                  # handles what no other runbook matches
    steps:
      - action: reboot
        name: reboot                  # default "<index>-<action>"; later steps refer to it
        when: "steps.reset.status == 'failed'"   # a Jinja2 expression
        on_failure: stop              # stop (default) or continue
        with: {timeout: 15m}          # the action's parameters; strings are Jinja2 templates

A template the sandbox refuses (fleetctl.remediation.sandbox) rejects the runbook when it loads.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from functools import lru_cache
from importlib import resources
from pathlib import Path
from typing import Any

from fleetctl.checks.safe_yaml import YamlRefused, loads, read_text
from fleetctl.remediation.actions import ACTIONS, BMC_ACTIONS, check_statuses
from fleetctl.remediation.sandbox import RunbookError, TemplateRefused, check_expression, check_template
from fleetctl.text import one_line

# The shipped runbooks are the package `runbooks` (package data of the distribution), so the
# same path holds in a checkout and in an installed wheel (pip installs wheels unzipped).
RUNBOOKS_DIR = Path(str(resources.files("fleetctl.runbooks")))

ON_FAILURE = ("stop", "continue")


@dataclass(frozen=True)
class Step:
    index: int
    name: str
    action: str
    params: dict[str, Any] = field(default_factory=dict)
    when: str | None = None
    on_failure: str = "stop"

    def to_dict(self) -> dict[str, Any]:
        return {
            "index": self.index,
            "name": self.name,
            "action": self.action,
            "params": self.params,
            "when": self.when,
            "on_failure": self.on_failure,
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Step:
        return cls(d["index"], d["name"], d["action"], dict(d["params"]), d.get("when"), d.get("on_failure", "stop"))


@dataclass(frozen=True)
class CheckMatch:
    name: str
    statuses: tuple[str, ...] = ("fail",)
    finding: str | None = None  # a regex searched in the result's reason and findings


@dataclass(frozen=True)
class Match:
    xids: tuple[int, ...] = ()
    checks: tuple[CheckMatch, ...] = ()
    fallback: bool = False
    # Production stragglers by the metric that found them (fleetctl.jobs.stragglers.TELEMETRY).
    stragglers: tuple[str, ...] = ()


@dataclass(frozen=True)
class Runbook:
    name: str
    description: str
    match: Match
    steps: tuple[Step, ...]
    priority: int = 0
    source: str = ""

    def to_dict(self) -> dict[str, Any]:
        """What a Remediation workflow carries: the runbook as it was when the run began."""
        return {
            "name": self.name,
            "description": self.description,
            "source": self.source,
            "steps": [s.to_dict() for s in self.steps],
        }


_NAME = re.compile(r"^[a-z0-9][a-z0-9_-]{0,62}\Z")
_TOP_KEYS = {"name", "description", "priority", "match", "steps"}
_STEP_KEYS = {"action", "name", "when", "on_failure", "with"}
# How much of a step's name or action an error quotes.
STEP_LABEL_LIMIT = 60


def parse_runbook(text: str, source: str = "<runbook>") -> Runbook:
    """Validate a runbook document; RunbookError names the file, the step and the reason."""

    def fail(reason: str, step: str | None = None) -> RunbookError:
        return RunbookError(f"{source}: {step + ': ' if step else ''}{reason}")

    try:
        doc = loads(text, source)
    except YamlRefused as exc:
        raise RunbookError(str(exc)) from None
    if not isinstance(doc, dict):
        raise fail("expected a mapping with name, match and steps")
    unknown = set(doc) - _TOP_KEYS
    if unknown:
        raise fail(f"unknown key {sorted(unknown, key=str)[0]!r} (allowed: {', '.join(sorted(_TOP_KEYS))})")
    name = doc.get("name")
    if not isinstance(name, str) or not _NAME.match(name):
        raise fail(f"name {name!r} must be lower-case letters, digits, '-' or '_'")
    priority = doc.get("priority", 0)
    if not isinstance(priority, int) or isinstance(priority, bool):
        raise fail(f"priority must be an integer, not {priority!r}")
    try:
        match = _parse_match(doc.get("match"))
    except ValueError as exc:
        raise fail(f"match: {exc}") from None
    raw_steps = doc.get("steps")
    if not isinstance(raw_steps, list) or not raw_steps:
        raise fail("steps must be a non-empty list")
    steps: list[Step] = []
    for index, raw in enumerate(raw_steps):
        label = f"step {index}"
        # The step's own words label it: one line, escaped and short, whatever the file holds.
        if isinstance(raw, dict) and isinstance(raw.get("name"), str):
            label += f" ({one_line(raw['name'], STEP_LABEL_LIMIT)})"
        elif isinstance(raw, dict) and isinstance(raw.get("action"), str):
            label += f" ({one_line(raw['action'], STEP_LABEL_LIMIT)})"
        try:
            steps.append(_parse_step(index, raw, {s.name for s in steps}))
        except TemplateRefused as exc:
            raise TemplateRefused(f"{source}: {label}: {exc}") from None
        except ValueError as exc:
            raise fail(str(exc), label) from None
    return Runbook(name, str(doc.get("description", "")).strip(), match, tuple(steps), priority, source)


def _parse_match(raw: Any) -> Match:
    if not isinstance(raw, dict) or not raw:
        raise ValueError("expected a mapping with xid, checks, stragglers and/or fallback")
    unknown = set(raw) - {"xid", "checks", "stragglers", "fallback"}
    if unknown:
        raise ValueError(f"unknown key {sorted(unknown, key=str)[0]!r}")
    xids = raw.get("xid", [])
    xids = [xids] if isinstance(xids, int) else xids
    if not isinstance(xids, list) or any(not isinstance(x, int) or isinstance(x, bool) or x <= 0 for x in xids):
        raise ValueError(f"xid must be a list of positive integers, not {raw.get('xid')!r}")
    checks = []
    for c in raw.get("checks", []) or []:
        if not isinstance(c, dict) or not isinstance(c.get("name"), str) or set(c) - {"name", "status", "finding"}:
            raise ValueError(f"each check needs a name (and optionally status, finding): {c!r}")
        finding = c.get("finding")
        if finding is not None:
            try:
                re.compile(finding)
            except (re.error, TypeError) as exc:
                raise ValueError(f"check {c['name']}: finding is not a regex ({exc})") from None
        checks.append(CheckMatch(c["name"], tuple(check_statuses(c.get("status", ["fail"]))), finding))
    fallback = raw.get("fallback", False)
    if not isinstance(fallback, bool):
        raise ValueError("fallback must be true or false")
    return Match(tuple(xids), tuple(checks), fallback, _straggler_metrics(raw.get("stragglers", [])))


def _straggler_metrics(raw: Any) -> tuple[str, ...]:
    from fleetctl.jobs.stragglers import BY_NAME  # when asked: most runbooks name none

    if not isinstance(raw, list) or any(not isinstance(m, str) for m in raw):
        raise ValueError(f"stragglers must be a list of metric names, not {raw!r}")
    unknown = [m for m in raw if m not in BY_NAME]
    if unknown:
        raise ValueError(f"stragglers: unknown metric {unknown[0]!r} (known: {', '.join(BY_NAME)})")
    return tuple(raw)


def _parse_step(index: int, raw: Any, earlier: set[str]) -> Step:
    if not isinstance(raw, dict):
        raise ValueError("expected a mapping with an action")
    unknown = set(raw) - _STEP_KEYS
    if unknown:
        raise ValueError(f"unknown key {sorted(unknown, key=str)[0]!r} (allowed: {', '.join(sorted(_STEP_KEYS))})")
    action = raw.get("action")
    if action not in ACTIONS:
        raise ValueError(f"unknown action {action!r} (one of: {', '.join(ACTIONS)})")
    name = raw.get("name", f"{index}-{action}")
    if not isinstance(name, str) or not _NAME.match(name):
        raise ValueError(f"step name {name!r} must be lower-case letters, digits, '-' or '_'")
    if name in earlier:
        raise ValueError(f"step name {name!r} is used twice")
    on_failure = raw.get("on_failure", "stop")
    if on_failure not in ON_FAILURE:
        raise ValueError(f"on_failure must be one of {', '.join(ON_FAILURE)}, not {on_failure!r}")
    when = raw.get("when")
    if when is not None:
        if not isinstance(when, str) or not when.strip():
            raise ValueError("when must be a Jinja2 expression")
        check_expression(when)
    given = raw.get("with") or {}
    if not isinstance(given, dict):
        raise ValueError("with must be a mapping of parameters")
    spec = ACTIONS[action]
    params: dict[str, Any] = {}
    for key, value in given.items():
        if key not in spec:
            allowed = ", ".join(spec) or "none"
            raise ValueError(f"{action} takes no parameter {key!r} (allowed: {allowed})")
        _check_templates(value)
        try:
            params[key] = spec[key].check(value)
        except ValueError as exc:
            raise ValueError(f"parameter {key}: {exc}") from None
    for key, p in spec.items():
        if key not in params:
            if p.required:
                raise ValueError(f"{action} needs parameter {key!r}")
            if p.default is not None:
                params[key] = p.default
    return Step(index, name, action, params, when, on_failure)


def _check_templates(value: Any) -> None:
    if isinstance(value, str):
        check_template(value)
    elif isinstance(value, list):
        for v in value:
            _check_templates(v)
    elif isinstance(value, dict):
        for v in value.values():
            _check_templates(v)


def load_runbook(path: str | Path) -> Runbook:
    try:
        text = read_text(path)
    except YamlRefused as exc:
        raise RunbookError(str(exc)) from None
    return _parsed(text, str(path))


@lru_cache(maxsize=128)
def _parsed(text: str, source: str) -> Runbook:
    """parse_runbook once per text: a node's remediation reads the directory each time, and
    parsing with its templates' checks was 4 % of a worker's CPU. The file is read every time,
    so an edited runbook is the one used. A Runbook is frozen and nobody changes a Step's params."""
    return parse_runbook(text, source)


def needing_bmc(books: Iterable[Runbook]) -> list[str]:
    """The runbooks with a step done through the node's BMC (BMC_ACTIONS), by name."""
    return sorted(b.name for b in books if any(s.action in BMC_ACTIONS for s in b.steps))


def load_runbooks(directory: str | Path = RUNBOOKS_DIR) -> dict[str, Runbook]:
    """Every runbook in the directory by name; one malformed file rejects the set."""
    books: dict[str, Runbook] = {}
    for path in sorted(Path(directory).glob("*.yaml")):
        book = load_runbook(path)
        if book.name in books:
            raise RunbookError(f"{path}: runbook name {book.name!r} is also used by {books[book.name].source}")
        books[book.name] = book
    return books
