"""The Jinja2 sandbox a runbook's templates run in, and its bounds. Pure.

Templates run in Jinja2's immutable sandbox with no loader and no globals: no attribute
of Python internals, no include/import, no file or shell access. A template that tries is
rejected when the runbook loads (`check_template`), and the sandbox refuses it again at
render time (`render`, `evaluate`). Every string or list a template would build is bounded
before it is built, so a typo cannot take the worker down.
"""

from __future__ import annotations

import operator
import re
import string
from collections.abc import Callable, Iterable, Mapping
from contextvars import ContextVar
from functools import cache
from typing import Any

from jinja2 import StrictUndefined, TemplateError, nodes, pass_eval_context
from jinja2.compiler import CodeGenerator, Frame
from jinja2.exceptions import SecurityError
from jinja2.nodes import EvalContext
from jinja2.runtime import Context
from jinja2.sandbox import ImmutableSandboxedEnvironment

from fleetctl.text import one_line


class RunbookError(ValueError):
    """A runbook is malformed; the message names the file, the step and the reason, on one line."""


class TemplateRefused(RunbookError):
    """A template broke a sandbox rule or could not be rendered."""


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


# A Jinja filter: called with the value (after the environment or context, for some) and its arguments.
Filter = Callable[..., Any]


def _bounded_filters(filters: Mapping[str, Filter]) -> dict[str, Filter]:
    """Jinja's filters, with the ones that can grow their input checked first and every result
    charged to the render."""

    def widths(filter_name: str) -> Filter:
        """The filter with its first argument (a width or count; also by keyword) bounded."""
        f, keyword = filters[filter_name], _WIDTH_FILTERS[filter_name]
        # Filters that take the environment or context first take the value second.
        first = 2 if hasattr(f, "jinja_pass_arg") else 1

        def checked(*args: Any, **kwargs: Any) -> Any:
            for width in (*args[first : first + 1], *([kwargs[keyword]] if keyword in kwargs else [])):
                _check_width(width, f"{filter_name} {keyword}")
            return f(*args, **kwargs)

        if hasattr(f, "jinja_pass_arg"):
            checked.jinja_pass_arg = f.jinja_pass_arg  # type: ignore[attr-defined]
        return checked

    def fmt(value: Any, *args: Any, **kwargs: Any) -> Any:
        _check_percent_format(_text(value))
        return filters["format"](value, *args, **kwargs)

    @pass_eval_context
    def replace(eval_ctx: EvalContext, value: Any, old: Any, new: Any, count: int | None = None) -> Any:
        text, old, new = _text(value), _text(old), _text(new)
        grows = max(len(new) - len(old), 0) * (text.count(old) if old else len(text) + 1)
        _charge(len(text) + grows, "replace")
        return filters["replace"](eval_ctx, value, old, new, count)

    @pass_eval_context
    def join(eval_ctx: EvalContext, value: Iterable[Any], d: Any = "", attribute: str | int | None = None) -> Any:
        items = list(value)
        _charge(len(_text(items)) + len(_text(d)) * len(items), "join")
        return filters["join"](eval_ctx, items, d, attribute)

    def indent(value: Any, width: Any = 4, first: bool = False, blank: bool = False) -> Any:
        # A width may also be the text to indent with.
        per_line = width if isinstance(width, int) else len(str(width))
        _check_width(per_line, "indent width")
        _charge(len(_text(value)) * (1 + per_line), "indent")
        return filters["indent"](value, width, first, blank)

    bounded = dict(filters)
    bounded.update({name: widths(name) for name in _WIDTH_FILTERS if name != "indent"})
    bounded.update({"format": fmt, "replace": replace, "join": join, "indent": indent})

    def charged(f: Filter) -> Filter:
        def run(*args: Any, **kwargs: Any) -> Any:
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
    def visit_Concat(self, node: nodes.Concat, frame: Frame) -> None:
        # `a ~ b ~ c`: Jinja joins the parts directly; route it through the size check.
        self.write("environment.concat((")
        for arg in node.nodes:
            self.visit(arg, frame)
            self.write(", ")
        self.write("))")


class _BoundedSandbox(ImmutableSandboxedEnvironment):
    intercepted_binops = frozenset({"*", "**", "+", "%"})
    code_generator_class = _BoundedCodeGenerator

    def concat(self, parts: Iterable[object]) -> str:
        texts = [_text(p) for p in parts]
        _charge(sum(map(len, texts)), "concatenating")
        return "".join(texts)

    def call_binop(self, context: Context, op: str, left: Any, right: Any) -> Any:
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

        def checked(*args: Any, **kwargs: Any) -> str:
            result = wrapper(*args, **kwargs)
            _charge(len(result), "str.format")
            return result

        return checked

    def call(__self, __context: Context, __obj: Any, *args: Any, **kwargs: Any) -> Any:
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
        # find_all types what it finds as the kinds' common base (Expr): one of the two here.
        if isinstance(node, nodes.Getattr):
            name: object = node.attr
        else:
            assert isinstance(node, nodes.Getitem)
            name = getattr(node.arg, "value", None)
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
            probe = nodes.Template([nodes.Output([shown])], lineno=1)
            probe.set_environment(sandbox())
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
