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
      stragglers: [nvlink_tx]         # production stragglers, by the metric that found them
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
import string
from collections.abc import Callable, Iterable, Mapping
from contextvars import ContextVar
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Any

from jinja2 import StrictUndefined, TemplateError, nodes
from jinja2.compiler import CodeGenerator
from jinja2.sandbox import ImmutableSandboxedEnvironment, SecurityError

from checks.safe_yaml import YamlRefused, loads, read_text
from fleetctl.durations import parse_seconds
from fleetctl.nodes.lifecycle import RULES, NodeState
from fleetctl.text import one_line

# The shipped runbooks are the package `runbooks` (package data of the distribution), so the
# same path holds in a checkout and in an installed wheel (pip installs wheels unzipped).
RUNBOOKS_DIR = Path(str(resources.files("runbooks")))

CHECK_STATUSES = ("pass", "warn", "fail", "error")
ON_FAILURE = ("stop", "continue")


class RunbookError(ValueError):
    """A runbook is malformed; the message names the file, the step and the reason, on one line."""


class TemplateRefused(RunbookError):
    """A template broke a sandbox rule or could not be rendered."""


# ---- the sandbox ----------------------------------------------------------------------------

# Bounds on what one template may build: a runbook is code an operator reviews, but a typo
# like `'=' * 10**9` or `x|center(300000000)` must not take the worker down. Every string or
# list an operation would build is checked *before* it is built, and one render may build at
# most MAX_WORK characters in all (so a loop cannot add up many small ones).
MAX_OUTPUT = 64 * 1024  # characters of one rendered value, or elements of one list
MAX_WIDTH = 1000  # a padding/format width, a batch or slice count
MAX_EXPONENT = 64
MAX_INT_BITS = 4096
MAX_WORK = 16 * MAX_OUTPUT

_work: ContextVar[list[int]] = ContextVar("runbook_template_work")
_PERCENT_SPEC = re.compile(r"%(?:\([^)]*\))?[#0 +-]*(\*|\d+)?(?:\.(\*|\d+))?[a-zA-Z%]")


def _size(value: Any) -> int:
    return len(value) if isinstance(value, (str, list, tuple)) else 0


def _charge(size: int, what: str) -> None:
    """Refuse building `size` characters/elements, before they are built."""
    if size > MAX_OUTPUT:
        raise SecurityError(f"{what} would build {size} characters (at most {MAX_OUTPUT})")
    spent = _work.get(None)
    if spent is not None:
        spent[0] += size
        if spent[0] > MAX_WORK:
            raise SecurityError(f"the template builds more than {MAX_WORK} characters in all")


def _text(value: Any) -> str:
    """str(value), refused before it is built when it would be longer than MAX_OUTPUT (a list
    of one long string repeated is small in memory and huge as text)."""
    left = MAX_OUTPUT
    pending = [value]
    while pending and left >= 0:
        item = pending.pop()
        if isinstance(item, str):
            left -= len(item)
        elif isinstance(item, (list, tuple, set, frozenset)):
            left -= 2 + 2 * len(item)
            pending.extend(item)
        elif isinstance(item, Mapping):
            left -= 2 + 4 * len(item)
            pending.extend(item.keys())
            pending.extend(item.values())
        else:
            left -= 8
    if left < 0:
        raise SecurityError(f"the value is longer than {MAX_OUTPUT} characters as text")
    text = str(value)
    _charge(len(text), "text")
    return text


def _check_width(value: Any, what: str) -> None:
    if isinstance(value, (int, float)) and not isinstance(value, bool) and abs(value) > MAX_WIDTH:
        raise SecurityError(f"{what} {value} is larger than {MAX_WIDTH}")


def _check_percent_format(fmt: str) -> None:
    for m in _PERCENT_SPEC.finditer(fmt):
        for part in (m[1], m[2]):
            if part == "*":
                raise SecurityError("'*' widths are not allowed in % formats")
            if part:
                _check_width(int(part), "format width")


def _check_brace_format(fmt: str) -> None:
    for _text, _field, spec, _conversion in string.Formatter().parse(fmt):
        if spec and "{" in spec:
            raise SecurityError("nested fields in format specs are not allowed")
        for digits in re.findall(r"\d+", spec or ""):
            _check_width(int(digits), "format width")


def _repeat(seq: Any, count: Any) -> None:
    if isinstance(count, int):
        _charge(_size(seq) * max(count, 0), "repeating a sequence")


# Filters whose first argument is a width or a count of things to build, and its keyword name.
_WIDTH_FILTERS = {
    "center": "width",
    "wordwrap": "width",
    "truncate": "length",
    "batch": "linecount",
    "slice": "slices",
    "indent": "width",
}


def _bounded_filters(filters: Mapping[str, Callable]) -> dict[str, Callable]:
    """Jinja's filters, with the ones that can grow their input checked first and every result
    charged to the render."""

    def widths(filter_name: str) -> Callable:
        """The filter with its first argument (a width or count; also by keyword) bounded."""
        f, keyword = filters[filter_name], _WIDTH_FILTERS[filter_name]
        # Filters that take the environment or context first take the value second.
        first = 2 if hasattr(f, "jinja_pass_arg") else 1

        def checked(*args, **kwargs):
            for width in (*args[first : first + 1], *([kwargs[keyword]] if keyword in kwargs else [])):
                _check_width(width, f"{filter_name} {keyword}")
            return f(*args, **kwargs)

        if hasattr(f, "jinja_pass_arg"):
            checked.jinja_pass_arg = f.jinja_pass_arg  # type: ignore[attr-defined]
        return checked

    def fmt(value, *args, **kwargs):
        _check_percent_format(_text(value))
        return filters["format"](value, *args, **kwargs)

    def replace(eval_ctx, value, old, new, count=None):
        text, old, new = _text(value), _text(old), _text(new)
        grows = max(len(new) - len(old), 0) * (text.count(old) if old else len(text) + 1)
        _charge(len(text) + grows, "replace")
        return filters["replace"](eval_ctx, value, old, new, count)

    def join(eval_ctx, value, d="", attribute=None):
        items = list(value)
        _charge(len(_text(items)) + len(_text(d)) * len(items), "join")
        return filters["join"](eval_ctx, items, d, attribute)

    def indent(value, width=4, first=False, blank=False):
        # A width may also be the text to indent with.
        per_line = width if isinstance(width, int) else len(str(width))
        _check_width(per_line, "indent width")
        _charge(len(_text(value)) * (1 + per_line), "indent")
        return filters["indent"](value, width, first, blank)

    replace.jinja_pass_arg = join.jinja_pass_arg = filters["join"].jinja_pass_arg  # type: ignore[attr-defined]
    bounded = dict(filters)
    bounded.update({name: widths(name) for name in _WIDTH_FILTERS if name != "indent"})
    bounded.update({"format": fmt, "replace": replace, "join": join, "indent": indent})

    def charged(f: Callable) -> Callable:
        def run(*args, **kwargs):
            result = f(*args, **kwargs)
            _charge(_size(result), "a filter")
            return result

        if hasattr(f, "jinja_pass_arg"):
            run.jinja_pass_arg = f.jinja_pass_arg  # type: ignore[attr-defined]
        return run

    return {name: charged(f) for name, f in bounded.items()}


# str methods that grow the string, and the argument that says by how much.
_GROWING_METHODS = {"center": 0, "ljust": 0, "rjust": 0, "zfill": 0, "expandtabs": 0}


class _BoundedCodeGenerator(CodeGenerator):
    def visit_Concat(self, node: nodes.Concat, frame) -> None:
        # `a ~ b ~ c`: Jinja joins the parts directly; route it through the size check.
        self.write("environment.concat((")
        for arg in node.nodes:
            self.visit(arg, frame)
            self.write(", ")
        self.write("))")


class _BoundedSandbox(ImmutableSandboxedEnvironment):
    intercepted_binops = frozenset({"*", "**", "+", "%"})
    code_generator_class = _BoundedCodeGenerator

    def concat(self, parts: tuple) -> str:
        texts = [_text(p) for p in parts]
        _charge(sum(map(len, texts)), "concatenating")
        return "".join(texts)

    def call_binop(self, context, op: str, left: Any, right: Any) -> Any:
        if op == "**" and isinstance(right, (int, float)) and abs(right) > MAX_EXPONENT:
            raise SecurityError(f"exponent {right} is larger than {MAX_EXPONENT}")
        if op in ("*", "**") and isinstance(left, int) and isinstance(right, int):
            bits = left.bit_length() * (abs(right) if op == "**" else 1) + (0 if op == "**" else right.bit_length())
            if bits > MAX_INT_BITS:
                raise SecurityError(f"the result would have more than {MAX_INT_BITS} bits")
        if op == "*":
            if isinstance(left, (str, list, tuple)):
                _repeat(left, right)
            elif isinstance(right, (str, list, tuple)):
                _repeat(right, left)
        if op == "+" and isinstance(left, (str, list, tuple)):
            _charge(_size(left) + _size(right), "concatenating")
        if op == "%" and isinstance(left, str):
            _check_percent_format(left)
        result = {"*": operator.mul, "**": operator.pow, "+": operator.add, "%": operator.mod}[op](left, right)
        if op == "%":
            _charge(_size(result), "a % format")
        return result

    def wrap_str_format(self, value: Any) -> Callable[..., str] | None:
        wrapper = super().wrap_str_format(value)
        if wrapper is None:
            return None
        _check_brace_format(value.__self__)

        def checked(*args, **kwargs):
            result = wrapper(*args, **kwargs)
            _charge(len(result), "str.format")
            return result

        return checked

    def call(__self, __context, __obj, *args, **kwargs):
        owner = getattr(__obj, "__self__", None)
        name = getattr(__obj, "__name__", "")
        if isinstance(owner, str):
            if name in _GROWING_METHODS and len(args) > _GROWING_METHODS[name]:
                _check_width(args[_GROWING_METHODS[name]], f"str.{name} width")
            elif name == "replace" and len(args) >= 2:
                old, new = str(args[0]), str(args[1])
                _charge(
                    len(owner) + max(len(new) - len(old), 0) * (owner.count(old) if old else len(owner) + 1),
                    "str.replace",
                )
            elif name == "join" and args:
                items = list(args[0])
                args = (items, *args[1:])
                _charge(len(_text(items)) + len(owner) * len(items), "str.join")
        result = super().call(__context, __obj, *args, **kwargs)
        _charge(_size(result), f"{name or 'a call'}")
        return result


@cache
def sandbox() -> ImmutableSandboxedEnvironment:
    env = _BoundedSandbox(
        undefined=StrictUndefined, autoescape=False, loader=None, keep_trailing_newline=False, finalize=_text
    )
    # range, dict, lipsum, cycler, joiner, namespace: nothing a runbook needs, and
    # cycler/joiner are the usual handles for reaching Python internals.
    env.globals.clear()
    env.filters = _bounded_filters(env.filters)
    return env


_FORBIDDEN_NODES = {
    nodes.Include: "include",
    nodes.Import: "import",
    nodes.FromImport: "import",
    nodes.Extends: "extends",
    # Macros recurse and call blocks re-enter them: runbook values need neither.
    nodes.Macro: "macro",
    nodes.CallBlock: "call",
}


def _refuse_unsafe(ast: nodes.Node) -> None:
    """Static rules, so a bad template fails at load time rather than mid-remediation."""
    for kind, what in _FORBIDDEN_NODES.items():
        if ast.find(kind) is not None:
            raise TemplateRefused(f"'{what}' is not allowed in runbook templates")
    for node in ast.find_all((nodes.Getattr, nodes.Getitem)):
        name = node.attr if isinstance(node, nodes.Getattr) else getattr(node.arg, "value", None)
        if isinstance(name, str) and name.startswith("_"):
            raise TemplateRefused(f"access to {name!r} is not allowed (no Python internals)")
    for node in ast.find_all(nodes.Filter):
        if node.name in _WIDTH_FILTERS:
            for arg in (*node.args[:1], *(k.value for k in node.kwargs if k.key == _WIDTH_FILTERS[node.name])):
                _check_static_width(arg, f"{node.name} {_WIDTH_FILTERS[node.name]}")
    for node in ast.find_all(nodes.Call):
        if isinstance(node.node, nodes.Getattr) and node.node.attr in _GROWING_METHODS and node.args:
            _check_static_width(node.args[0], f"str.{node.node.attr} width")
    for node in ast.find_all(nodes.Mod):
        if isinstance(node.left, nodes.Const) and isinstance(node.left.value, str):
            try:
                _check_percent_format(node.left.value)
            except SecurityError as exc:
                raise TemplateRefused(f"refused by the sandbox: {exc}") from None
    for loop in ast.find_all(nodes.For):
        if any(inner is not loop for inner in loop.find_all(nodes.For)):
            raise TemplateRefused("nested loops are not allowed (their work multiplies)")
    try:
        _evaluate_constant_parts(ast)
    except SecurityError as exc:
        raise TemplateRefused(f"refused by the sandbox: {one_line(exc)}") from None


def _check_static_width(arg: nodes.Node, what: str) -> None:
    if isinstance(arg, nodes.Const):
        try:
            _check_width(arg.value, what)
        except SecurityError as exc:
            raise TemplateRefused(f"refused by the sandbox: {exc}") from None


def _evaluate_constant_parts(node: nodes.Node) -> None:
    """Evaluate every part of the template that depends on no variable, under the same bounds
    as a render, so `'x'|center(300000000)` is refused by `runbook validate`, not mid-run.
    Only the sandbox's refusals count here: other errors may depend on the data."""
    for child in node.iter_child_nodes():
        if (
            isinstance(child, nodes.Expr)
            and not isinstance(child, (nodes.Const, nodes.TemplateData))
            and child.find(nodes.Name) is None
        ):
            # Printed as the template would print it (finalize bounds the text before it is
            # built), or, inside a larger expression, only evaluated.
            shown = child if isinstance(node, nodes.Output) else nodes.CondExpr(child, nodes.Const(""), nodes.Const(""))
            probe = nodes.Template([nodes.Output([shown])], lineno=1).set_environment(sandbox())
            token = _work.set([0])
            try:
                sandbox().from_string(probe).render()
            except SecurityError:
                raise
            except Exception:  # noqa: BLE001 - a constant that fails otherwise fails at run time too
                pass
            finally:
                _work.reset(token)
        else:
            _evaluate_constant_parts(child)


def check_template(source: str) -> None:
    """Parse and statically check a template; TemplateRefused says why it is rejected."""
    try:
        ast = sandbox().parse(source)
    except TemplateError as exc:
        raise TemplateRefused(f"template does not parse: {one_line(exc)}") from None
    _refuse_unsafe(ast)


def check_expression(source: str) -> None:
    check_template("{{ " + source + " }}")


def _failed(what: str, exc: BaseException) -> TemplateRefused:
    if isinstance(exc, SecurityError):
        return TemplateRefused(f"refused by the sandbox: {one_line(exc)}")
    return TemplateRefused(f"{what} failed: {exc.__class__.__name__}: {one_line(exc)}")


def render(source: str, context: Mapping[str, Any]) -> str:
    """The rendered text; every failure (a sandbox refusal, a missing value, a division by
    zero...) is TemplateRefused with one line, which the caller records as the step failing."""
    check_template(source)
    token = _work.set([0])
    parts: list[str] = []
    size = 0
    try:
        for part in sandbox().from_string(source).generate(**context):
            size += len(part)
            if size > MAX_OUTPUT:
                raise SecurityError(f"the rendered value is longer than {MAX_OUTPUT} characters")
            parts.append(part)
    except Exception as exc:  # noqa: BLE001 - any error of a template is the template's failure
        raise _failed("template", exc) from None
    finally:
        _work.reset(token)
    return "".join(parts)


def evaluate(expression: str, context: Mapping[str, Any]) -> Any:
    """The expression's value; TemplateRefused, as for `render`, when it cannot be evaluated."""
    check_expression(expression)
    token = _work.set([0])
    try:
        return sandbox().compile_expression(expression, undefined_to_none=False)(**context)
    except Exception as exc:  # noqa: BLE001 - any error of a condition is the condition's failure
        raise _failed("condition", exc) from None
    finally:
        _work.reset(token)


def render_value(value: Any, context: Mapping[str, Any]) -> Any:
    """Strings are templates; lists and mappings are rendered element by element."""
    if isinstance(value, str):
        return render(value, context)
    if isinstance(value, list):
        return [render_value(v, context) for v in value]
    if isinstance(value, dict):
        return {k: render_value(v, context) for k, v in value.items()}
    return value


# ---- actions and their parameters -----------------------------------------------------------


def _str(v: Any) -> str:
    if not isinstance(v, str):
        raise ValueError(f"expected text, got {type(v).__name__}")
    return v


def _duration(v: Any) -> Any:
    if isinstance(v, str) and "{{" in v:
        return v  # checked after rendering
    parse_seconds(v)
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
# Actions done through the node's BMC (fleetctl.bmc): on a node without one they fail.
BMC_ACTIONS = frozenset({"reboot"})


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


# What a drain is travels in the failure it records (node_events.failure, Event.failure):
# a fault's label (`xid 79`, `check nccl-allreduce`, `operator`, ...), or PLANNED for an
# operator's planned work (a maintenance drain). An operator's drain that records nothing
# (before drains said what they were) is planned work too.
MAINTENANCE = "maintenance"
PLANNED = "maintenance"


def is_planned_drain(from_state: str, to_state: str, failure: str, actor_kind: str) -> bool:
    """A move out of production for planned work, not for a fault."""
    if from_state != NodeState.PRODUCTION.value or to_state == NodeState.PRODUCTION.value:
        return False
    return failure == PLANNED or (not failure and actor_kind == "operator")


def what_a_drain_is(from_state: str, to_state: str, failure: str, actor_kind: str, trigger: str = "") -> str:
    """A move out of production in words for `node show` and the history: `maintenance`,
    `failure: <label>` (the label the report counts it under), or "" for any other move."""
    if from_state != NodeState.PRODUCTION.value or to_state == NodeState.PRODUCTION.value:
        return ""
    if is_planned_drain(from_state, to_state, failure, actor_kind):
        return PLANNED
    if failure:
        return f"failure: {failure}"
    return "failure: automation" if actor_kind == "automation" and trigger == "drain" else ""


def remediation_entries(transitions: Iterable[Any]) -> list[datetime]:
    """When the node entered maintenance to be remediated, from its transitions in recorded
    order (anything with from_state, to_state, failure, actor_kind and at: node_events rows,
    fleetctl.reliability.metrics.Transition). The entry that ends a planned drain (straight
    from production or draining, while the node is out for maintenance) is not a remediation;
    a check that fails while it is out (burn-in back to maintenance) is."""
    out_for_maintenance = False
    entries = []
    for t in transitions:
        if t.from_state == NodeState.PRODUCTION.value and t.to_state != NodeState.PRODUCTION.value:
            out_for_maintenance = is_planned_drain(t.from_state, t.to_state, t.failure, t.actor_kind)
        elif t.to_state == NodeState.PRODUCTION.value:
            out_for_maintenance = False
        if t.to_state == NodeState.MAINTENANCE.value and not (
            out_for_maintenance and t.from_state in (NodeState.PRODUCTION.value, NodeState.DRAINING.value)
        ):
            entries.append(t.at)
    return entries


@dataclass(frozen=True)
class Event:
    """What a runbook reacts to: an XID from the kernel log, a check result, or an operator."""

    # "xid", "check", "straggler" (check: its metric), "manual" (a health event without a
    # code, a runbook run by hand), "operator" (an operator's drain for a fault it names no
    # code or check of) or "maintenance" (an operator's drain for planned work: no fault).
    kind: str
    code: int | None = None
    check: str | None = None
    status: str | None = None
    message: str = ""
    # A check failed not on the profile's floors but against the node's peers (a straggler):
    # remediated as the check's failure, counted as a rule of its own.
    against_peers: bool = False

    @property
    def summary(self) -> str:
        if self.kind == "xid":
            return f"XID {self.code}" + (f": {self.message}" if self.message else "")
        if self.kind == "check":
            return f"check {self.check} {self.status}" + (f": {self.message}" if self.message else "")
        if self.kind == "straggler":
            return f"straggler on {self.check}" + (f": {self.message}" if self.message else "")
        return self.message or "operator request"

    @property
    def critical(self) -> bool:
        """An XID whose catalog severity is critical: the capacity guard lets its drain use
        the reserve kept for such faults."""
        from checks.xid import xid_action  # when asked: parsing runbooks needs no Xid catalog

        return self.kind == "xid" and self.code is not None and xid_action(self.code).severity == "critical"

    @property
    def failure(self) -> str:
        """The failure a drain for this event is counted as (fleetctl.reliability.metrics' cause label):
        `xid <code>`, `check <name>`, `straggler <check>` for a check a sweep passed well
        below the node's peers, `straggler <metric>` for a node behind its job's other nodes
        in production (each its own label: rule precision tells the rules apart), or `health`
        for a health event without a code."""
        if self.kind == "xid":
            return f"xid {self.code}"
        if self.kind == "check":
            return f"{'straggler' if self.against_peers else 'check'} {self.check}"
        if self.kind == "straggler":
            return f"straggler {self.check}"
        if self.kind == MAINTENANCE:
            return PLANNED
        if self.kind == "operator":
            return "operator"
        return "health"

    @property
    def remediable(self) -> bool:
        """Whether a runbook may take this event on: planned work and an operator's fault
        without a code or check are the operator's to handle, not a runbook's fallback."""
        return self.kind not in ("manual", "operator", MAINTENANCE)

    def to_dict(self) -> dict[str, Any]:
        d = {
            "kind": self.kind,
            "code": self.code,
            "check": self.check,
            "status": self.status,
            "message": self.message,
            "summary": self.summary,
        }
        # Only when set: events recorded before peers were judged keep their shape.
        return {**d, "against_peers": True} if self.against_peers else d

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Event:
        return cls(
            d.get("kind", "manual"),
            d.get("code"),
            d.get("check"),
            d.get("status"),
            d.get("message", ""),
            d.get("against_peers") is True,
        )


# ---- loading --------------------------------------------------------------------------------

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
        checks.append(CheckMatch(c["name"], tuple(_statuses(c.get("status", ["fail"]))), finding))
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
    return parse_runbook(text, str(path))


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


# ---- matching -------------------------------------------------------------------------------


def matches(book: Runbook, event: Event, findings_text: str = "") -> bool:
    """Does the runbook handle this event? `findings_text` is the check's reason and findings."""
    if event.kind == "xid":
        return event.code in book.match.xids
    if event.kind == "straggler":
        return event.check in book.match.stragglers
    if event.kind == "check":
        for c in book.match.checks:
            if (
                c.name == event.check
                and event.status in c.statuses
                and (c.finding is None or re.search(c.finding, f"{event.message}\n{findings_text}", re.I))
            ):
                return True
    return False


def runbook_for(books: Iterable[Runbook], event: Event, findings_text: str = "") -> Runbook | None:
    """The runbook that handles the event: the highest-priority match, else the fallback."""
    books = sorted(books, key=lambda b: (-b.priority, b.name))
    for book in books:
        if matches(book, event, findings_text):
            return book
    if event.kind == MAINTENANCE:
        return None
    return next((b for b in books if b.match.fallback and event.remediable), None)


# ---- state changes and escalation ----------------------------------------------------------


def trigger_towards(current: str, target: str) -> str | None:
    """The automation trigger that moves a node from `current` straight to `target`, if any."""
    for trigger, rule in RULES.items():
        if rule.target.value == target and NodeState(current) in rule.sources and not rule.operator_only:
            return trigger.value
    return None


@dataclass(frozen=True)
class LemonPolicy:
    """A node remediated `threshold` times within `window` is a lemon: RMA, not production.

    "Times remediated" is one figure, `times_remediated`, shown as "remediated N times in
    D days" by the RMA reason, `fleetctl report`'s lemon table and `fleetctl node show`.
    """

    threshold: int = 3
    window: timedelta = timedelta(days=7)

    def times_remediated(
        self, run_starts: Iterable[datetime], maintenance_entries: Iterable[datetime], now: datetime
    ) -> int:
        """How many times the node was remediated in the window that ends at `now`: its live
        remediation runs begun in it, or its entries into maintenance in it, whichever is more.
        Both, because neither alone sees every repair: a run begins before the drain it asks
        for (its entry comes later), and a burn-in that fails again puts the node back in
        maintenance while the run that sent it there is still going (no new run)."""
        since = now - self.window

        def within(times: Iterable[datetime]) -> int:
            return sum(1 for at in times if since <= at <= now)

        return max(within(run_starts), within(maintenance_entries))

    def is_lemon(self, run_starts: Iterable[datetime], maintenance_entries: Iterable[datetime], now: datetime) -> bool:
        return self.times_remediated(run_starts, maintenance_entries, now) >= self.threshold

    def describe(self, times: int) -> str:
        """The figure in words, the same wherever it is shown."""
        from fleetctl.text import plural
        from fleetctl.text import times as how_often

        return f"remediated {how_often(times)} in {plural(self.window / timedelta(days=1), 'day')}"
