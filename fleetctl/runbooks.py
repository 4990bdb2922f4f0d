"""Remediation runbooks: the YAML model, its validation, event matching, sandboxed templates
and the lemon-node escalation policy. Pure: no I/O beyond reading the runbook files.

A runbook names the events it handles and an ordered list of steps:

    name: xid-79-fallen-off-bus
    description: ...
    priority: 50                      # the highest-priority match wins; ties by name
    match:
      xid: [79]                       # kernel-log XID codes
      checks:                         # check results: name, statuses, a finding regex
        - {name: nvidia-smi-query, status: [fail], finding: "row remapping failed"}
      fallback: true                  # handles what no other runbook matches
    steps:
      - action: reboot
        name: reboot                  # default "<index>-<action>"; later steps refer to it
        when: "steps.reset.status == 'failed'"   # a Jinja2 expression
        on_failure: stop              # stop (default) or continue
        with: {timeout: 15m}          # the action's parameters; strings are Jinja2 templates

Templates run in Jinja2's immutable sandbox with no loader and no globals: no attribute
of Python internals, no include/import, no file or shell access. A template that tries is
rejected when the runbook loads, and the sandbox refuses it again at render time.
"""

from __future__ import annotations

import operator
import re
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping

import yaml
from jinja2 import StrictUndefined, TemplateError, nodes
from jinja2.sandbox import ImmutableSandboxedEnvironment, SecurityError

from fleetctl.lifecycle import RULES, NodeState

# The shipped runbooks are the package `runbooks` (package data of the distribution), so the
# same path holds in a checkout and in an installed wheel (pip installs wheels unzipped).
RUNBOOKS_DIR = Path(str(resources.files("runbooks")))

CHECK_STATUSES = ("pass", "warn", "fail", "error")
ON_FAILURE = ("stop", "continue")


class RunbookError(ValueError):
    """A runbook is malformed; the message names the file, the step and the reason, on one line."""


class TemplateRefused(RunbookError):
    """A template broke a sandbox rule or could not be rendered."""


# ---- durations ------------------------------------------------------------------------------

_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(s|m|h|d)?\s*\Z")
_UNIT_S = {"s": 1, "m": 60, "h": 3600, "d": 86400, None: 1}


def parse_duration(value: Any) -> float:
    """Seconds from 90, "90s", "15m", "2h" or "7d"."""
    if isinstance(value, (int, float)) and not isinstance(value, bool) and value >= 0:
        return float(value)
    m = _DURATION.match(str(value))
    if not m:
        raise ValueError(f"not a duration: {value!r} (use e.g. 30s, 15m, 2h, 7d)")
    return float(m[1]) * _UNIT_S[m[2]]


# ---- the sandbox ----------------------------------------------------------------------------

# Bounds on what one template may build: a runbook is code an operator reviews, but a
# typo like `'=' * 10**9` must not take the worker down.
MAX_REPEAT = 10_000
MAX_EXPONENT = 64


class _BoundedSandbox(ImmutableSandboxedEnvironment):
    intercepted_binops = frozenset({"*", "**"})

    def call_binop(self, context, op: str, left: Any, right: Any) -> Any:
        if op == "**" and isinstance(right, (int, float)) and abs(right) > MAX_EXPONENT:
            raise SecurityError(f"exponent {right} is larger than {MAX_EXPONENT}")
        if op == "*" and (isinstance(left, (str, list)) or isinstance(right, (str, list))):
            count = right if isinstance(left, (str, list)) else left
            if isinstance(count, int) and count > MAX_REPEAT:
                raise SecurityError(f"repeating a sequence {count} times (at most {MAX_REPEAT})")
        return {"*": operator.mul, "**": operator.pow}[op](left, right)


@cache
def sandbox() -> ImmutableSandboxedEnvironment:
    env = _BoundedSandbox(undefined=StrictUndefined, autoescape=False, loader=None, keep_trailing_newline=False)
    # range, dict, lipsum, cycler, joiner, namespace: nothing a runbook needs, and
    # cycler/joiner are the usual handles for reaching Python internals.
    env.globals.clear()
    return env


_FORBIDDEN_NODES = {
    nodes.Include: "include",
    nodes.Import: "import",
    nodes.FromImport: "import",
    nodes.Extends: "extends",
}


def _refuse_unsafe(ast: nodes.Node) -> None:
    """Static rules, so a bad template fails at load time rather than mid-remediation."""
    for kind, what in _FORBIDDEN_NODES.items():
        if ast.find(kind) is not None:
            raise TemplateRefused(f"'{what}' is not allowed in runbook templates (no file access)")
    for node in ast.find_all((nodes.Getattr, nodes.Getitem)):
        name = node.attr if isinstance(node, nodes.Getattr) else getattr(node.arg, "value", None)
        if isinstance(name, str) and name.startswith("_"):
            raise TemplateRefused(f"access to {name!r} is not allowed (no Python internals)")


def check_template(source: str) -> None:
    """Parse and statically check a template; TemplateRefused says why it is rejected."""
    try:
        ast = sandbox().parse(source)
    except TemplateError as exc:
        raise TemplateRefused(f"template does not parse: {_one_line(exc)}") from None
    _refuse_unsafe(ast)


def check_expression(source: str) -> None:
    check_template("{{ " + source + " }}")


def render(source: str, context: Mapping[str, Any]) -> str:
    check_template(source)
    try:
        return sandbox().from_string(source).render(**context)
    except SecurityError as exc:
        raise TemplateRefused(f"refused by the sandbox: {_one_line(exc)}") from None
    except TemplateError as exc:
        raise TemplateRefused(f"template failed: {_one_line(exc)}") from None


def evaluate(expression: str, context: Mapping[str, Any]) -> Any:
    check_expression(expression)
    try:
        return sandbox().compile_expression(expression, undefined_to_none=False)(**context)
    except SecurityError as exc:
        raise TemplateRefused(f"refused by the sandbox: {_one_line(exc)}") from None
    except TemplateError as exc:
        raise TemplateRefused(f"condition failed: {_one_line(exc)}") from None


def render_value(value: Any, context: Mapping[str, Any]) -> Any:
    """Strings are templates; lists and mappings are rendered element by element."""
    if isinstance(value, str):
        return render(value, context)
    if isinstance(value, list):
        return [render_value(v, context) for v in value]
    if isinstance(value, dict):
        return {k: render_value(v, context) for k, v in value.items()}
    return value


def _one_line(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    return text[:200] or exc.__class__.__name__


# ---- actions and their parameters -----------------------------------------------------------


def _str(v: Any) -> str:
    if not isinstance(v, str):
        raise ValueError(f"expected text, got {type(v).__name__}")
    return v


def _duration(v: Any) -> Any:
    if isinstance(v, str) and "{{" in v:
        return v  # checked after rendering
    parse_duration(v)
    return v


def _statuses(v: Any) -> list[str]:
    values = [v] if isinstance(v, str) else v
    if not isinstance(values, list) or not values or any(s not in CHECK_STATUSES for s in values):
        raise ValueError(f"expected check statuses from {', '.join(CHECK_STATUSES)}, got {v!r}")
    return values


def _state(v: Any) -> str:
    if v not in {s.value for s in NodeState} or v == NodeState.RETIRED.value:
        raise ValueError(f"unknown or operator-only state {v!r}")
    return v


def _gpu(v: Any) -> Any:
    if isinstance(v, bool) or not isinstance(v, (int, str)):
        raise ValueError(f"expected a GPU index, got {v!r}")
    return v


@dataclass(frozen=True)
class Param:
    check: Callable[[Any], Any]
    required: bool = False
    default: Any = None


ACTIONS: dict[str, dict[str, Param]] = {
    "drain": {"reason": Param(_str, default="runbook {{ runbook }}: {{ event.summary }}")},
    "restart_jobs": {},
    "gpu_reset": {"gpu": Param(_gpu), "idle_timeout": Param(_duration, default="30m")},
    "reboot": {"timeout": Param(_duration, default="15m"), "reset_type": Param(_str, default="ForceRestart")},
    "run_check": {"check": Param(_str, required=True), "expect": Param(_statuses, default=["pass"])},
    "run_suite": {"suite": Param(_str, required=True), "expect": Param(_statuses, default=["pass"])},
    "wait": {"duration": Param(_duration, required=True)},
    "set_state": {"state": Param(_state, required=True), "cause": Param(_str, default="runbook {{ runbook }}")},
    "rma": {"reason": Param(_str, default="runbook {{ runbook }}: {{ event.summary }}")},
    "notify": {"message": Param(_str, required=True), "severity": Param(_str, default="info")},
}

# Actions that touch the hardware: the node must be out of service (maintenance) first.
DISRUPTIVE = frozenset({"gpu_reset", "reboot", "run_check", "run_suite"})


@dataclass(frozen=True)
class Step:
    index: int
    name: str
    action: str
    params: dict[str, Any] = field(default_factory=dict)
    when: str | None = None
    on_failure: str = "stop"

    def to_dict(self) -> dict[str, Any]:
        return {"index": self.index, "name": self.name, "action": self.action, "params": self.params,
                "when": self.when, "on_failure": self.on_failure}

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
        return {"name": self.name, "description": self.description, "source": self.source,
                "steps": [s.to_dict() for s in self.steps]}


@dataclass(frozen=True)
class Event:
    """What a runbook reacts to: an XID from the kernel log, a check result, or an operator."""

    kind: str  # "xid", "check" or "manual"
    code: int | None = None
    check: str | None = None
    status: str | None = None
    message: str = ""

    @property
    def summary(self) -> str:
        if self.kind == "xid":
            return f"XID {self.code}" + (f": {self.message}" if self.message else "")
        if self.kind == "check":
            return f"check {self.check} {self.status}" + (f": {self.message}" if self.message else "")
        return self.message or "operator request"

    def to_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "code": self.code, "check": self.check, "status": self.status,
                "message": self.message, "summary": self.summary}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Event:
        return cls(d.get("kind", "manual"), d.get("code"), d.get("check"), d.get("status"), d.get("message", ""))


# ---- loading --------------------------------------------------------------------------------

_NAME = re.compile(r"^[a-z0-9][a-z0-9_-]{0,62}\Z")
_TOP_KEYS = {"name", "description", "priority", "match", "steps"}
_STEP_KEYS = {"action", "name", "when", "on_failure", "with"}


def parse_runbook(text: str, source: str = "<runbook>") -> Runbook:
    """Validate a runbook document; RunbookError names the file, the step and the reason."""

    def fail(reason: str, step: str | None = None) -> RunbookError:
        return RunbookError(f"{source}: {step + ': ' if step else ''}{reason}")

    try:
        doc = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}" if mark else ""
        raise fail(f"not valid YAML{where}") from None
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
        if isinstance(raw, dict) and isinstance(raw.get("name"), str):
            label += f" ({raw['name']})"
        elif isinstance(raw, dict) and isinstance(raw.get("action"), str):
            label += f" ({raw['action']})"
        try:
            steps.append(_parse_step(index, raw, {s.name for s in steps}))
        except TemplateRefused as exc:
            raise TemplateRefused(f"{source}: {label}: {exc}") from None
        except ValueError as exc:
            raise fail(str(exc), label) from None
    return Runbook(name, str(doc.get("description", "")).strip(), match, tuple(steps), priority, source)


def _parse_match(raw: Any) -> Match:
    if not isinstance(raw, dict) or not raw:
        raise ValueError("expected a mapping with xid, checks and/or fallback")
    unknown = set(raw) - {"xid", "checks", "fallback"}
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
        checks.append(CheckMatch(c["name"], tuple(_statuses(c.get("status", ["fail"]))), finding))
    fallback = raw.get("fallback", False)
    if not isinstance(fallback, bool):
        raise ValueError("fallback must be true or false")
    return Match(tuple(xids), tuple(checks), fallback)


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
    path = Path(path)
    try:
        text = path.read_text()
    except OSError as exc:
        raise RunbookError(f"{path}: cannot read ({exc.strerror or exc.__class__.__name__})") from None
    return parse_runbook(text, str(path))


def load_runbooks(directory: str | Path = RUNBOOKS_DIR) -> dict[str, Runbook]:
    """Every runbook in the directory by name; one malformed file rejects the set."""
    books: dict[str, Runbook] = {}
    for path in sorted(Path(directory).glob("*.yaml")):
        book = load_runbook(path)
        if book.name in books:
            raise RunbookError(f"{path}: runbook name {book.name!r} is also used by {books[book.name].source}")
        books[book.name] = book
    return books


# ---- matching -------------------------------------------------------------------------------


def matches(book: Runbook, event: Event, findings_text: str = "") -> bool:
    """Does the runbook handle this event? `findings_text` is the check's reason and findings."""
    if event.kind == "xid":
        return event.code in book.match.xids
    if event.kind == "check":
        for c in book.match.checks:
            if c.name == event.check and event.status in c.statuses:
                if c.finding is None or re.search(c.finding, f"{event.message}\n{findings_text}", re.I):
                    return True
    return False


def runbook_for(books: Iterable[Runbook], event: Event, findings_text: str = "") -> Runbook | None:
    """The runbook that handles the event: the highest-priority match, else the fallback."""
    books = sorted(books, key=lambda b: (-b.priority, b.name))
    for book in books:
        if matches(book, event, findings_text):
            return book
    return next((b for b in books if b.match.fallback and event.kind != "manual"), None)


# ---- state changes and escalation ----------------------------------------------------------


def trigger_towards(current: str, target: str) -> str | None:
    """The automation trigger that moves a node from `current` straight to `target`, if any."""
    for trigger, rule in RULES.items():
        if rule.target.value == target and NodeState(current) in rule.sources and not rule.operator_only:
            return trigger.value
    return None


RETURNS_TO_SERVICE = frozenset({NodeState.BURN_IN.value, NodeState.ADMISSION.value, NodeState.PRODUCTION.value})


@dataclass(frozen=True)
class LemonPolicy:
    """A node remediated `threshold` times within `window` is a lemon: RMA, not production."""

    threshold: int = 3
    window: timedelta = timedelta(days=7)

    def is_lemon(self, remediations: Iterable[datetime], now: datetime) -> bool:
        """`remediations`: when each live remediation of the node began, this one included."""
        since = now - self.window
        return sum(1 for at in remediations if since <= at <= now) >= self.threshold
