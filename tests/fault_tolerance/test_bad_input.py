"""Bad input: every parser and loader, fed garbage, gives a clear error and nothing else.

No crash (only the loader's own error type escapes), no hang (each call is timed), the
error is one line that names the source, and the CLI writes nothing when its input is bad.
"""

from __future__ import annotations

import random
import time
from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from fleetctl.checks import KINDS, Status, judge
from fleetctl.checks._text import UnjudgeableOutput
from fleetctl.checks.suites import SuiteError, load_suites
from fleetctl.checks.xid import parse_xid_lines
from fleetctl.config import ConfigError, load_settings
from fleetctl.durations import parse_duration
from fleetctl.inventory.parse import InventoryError, parse_inventory, parse_selector
from fleetctl.remediation import firmware
from fleetctl.remediation.runbooks import parse_runbook
from fleetctl.remediation.sandbox import RunbookError

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "checks"
FUZZ = settings(
    max_examples=150,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
# A parser that takes longer than this on a few kilobytes has a runaway regex or loop.
PARSE_BUDGET_S = 1.0
# Kinds whose verdict rests on result lines the tool must print: text without them is never
# healthy. (A kernel log with no XID line is healthy, so `xid` is not among them.)
NEEDS_RESULT_LINES = tuple(k for k in KINDS if k != "xid")

# YAML-shaped garbage: the documents a typo, a wrong file or a hostile user produce.
SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**70), 2**70),
    st.floats(allow_nan=True),
    st.text(max_size=30),
    st.sampled_from(["{{ 1 }}", "{% for %}", "sim://x", "h100-sxm", "quick", "$(id)", "a;b", "--", "\n", "~"]),
)
DOCUMENTS = st.recursive(
    SCALARS,
    lambda inner: st.one_of(
        st.lists(inner, max_size=5), st.dictionaries(st.one_of(st.text(max_size=12), st.integers()), inner, max_size=5)
    ),
    max_leaves=25,
)

NODE_ENTRIES = st.fixed_dictionaries(
    {"name": SCALARS, "address": SCALARS, "profile": SCALARS},
    optional={"rack": SCALARS, "labels": DOCUMENTS, "scheduler": SCALARS, "bmc": SCALARS, "user": SCALARS},
)
INVENTORIES = st.one_of(
    DOCUMENTS, st.fixed_dictionaries({"nodes": st.lists(st.one_of(DOCUMENTS, NODE_ENTRIES), max_size=4)})
)
RUNBOOK_STEPS = st.fixed_dictionaries(
    {"action": st.sampled_from(["gpu_reset", "reboot", "run_check", "notify", "drain", "wait", "set_state", "bogus"])},
    optional={"with": DOCUMENTS, "when": SCALARS, "on_failure": SCALARS, "name": SCALARS},
)
RUNBOOKS = st.one_of(
    DOCUMENTS,
    st.fixed_dictionaries(
        {
            "name": st.one_of(SCALARS, st.just("rb")),
            "match": st.one_of(DOCUMENTS, st.just({"xid": [79]})),
            "steps": st.lists(st.one_of(DOCUMENTS, RUNBOOK_STEPS), max_size=4),
        },
        optional={"priority": SCALARS, "description": SCALARS},
    ),
)


def _healthy_lines() -> list[str]:
    return [line for path in sorted(FIXTURES.glob("*/*_ok.txt")) for line in path.read_text().splitlines()]


HEALTHY_LINES = _healthy_lines()


def _timed(call, *args):
    started = time.monotonic()
    result = call(*args)
    assert time.monotonic() - started < PARSE_BUDGET_S, f"{call.__name__} took {time.monotonic() - started:.2f}s"
    return result


def _one_line_error(exc: BaseException) -> None:
    text = str(exc)
    assert text and "\n" not in text and "Traceback" not in text, repr(text)


def _yaml_text(doc) -> str:
    return yaml.safe_dump(doc, allow_unicode=True)


# -- parsers -------------------------------------------------------------------------------


@FUZZ
@given(kind=st.sampled_from(KINDS), text=st.text(max_size=3000))
def test_arbitrary_text_is_a_verdict_and_never_a_pass(kind: str, text: str) -> None:
    result = _timed(judge, kind, text, "h100-sxm")
    assert isinstance(result.status, Status)
    if kind in NEEDS_RESULT_LINES:
        assert result.status is not Status.PASS, (kind, text, result.reason)
    if result.status is Status.ERROR:
        assert result.reason


@FUZZ
@given(
    kind=st.sampled_from(KINDS),
    seed=st.integers(0, 2**32),
    count=st.integers(1, 200),
    noise=st.lists(st.text(max_size=80), max_size=10),
)
def test_real_tool_lines_mixed_up_are_a_verdict(kind: str, seed: int, count: int, noise: list[str]) -> None:
    """Lines of real outputs of every tool, shuffled and interleaved with noise: the shape a
    tool upgrade or a garbled terminal produces. Any verdict is fine; an exception is not."""
    rng = random.Random(seed)
    lines = rng.sample(HEALTHY_LINES, min(count, len(HEALTHY_LINES))) + noise
    rng.shuffle(lines)
    assert isinstance(_timed(judge, kind, "\n".join(lines), "h100-sxm").status, Status)


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize(
    "shape",
    [
        "9" * 200_000,
        "| " * 100_000,
        "Xid " * 50_000,
        ("1 " * 40 + "\n") * 5_000,
        "[" * 50_000,
        "{" * 50_000,
        '{"a":' * 5_000,
        "\0\x1b[31m\r" * 20_000,
    ],
    ids=["digits", "pipes", "xids", "wide-rows", "brackets", "braces", "deep-json", "control"],
)
def test_pathological_large_inputs_finish_quickly(kind: str, shape: str) -> None:
    result = _timed(judge, kind, shape, "h100-sxm")
    if kind in NEEDS_RESULT_LINES:
        assert result.status is not Status.PASS


@FUZZ
@given(text=st.text(max_size=2000))
def test_kernel_log_parser_never_raises(text: str) -> None:
    """Anything it cannot read is UnjudgeableOutput (a ValueError, one line); nothing else escapes."""
    try:
        events = _timed(parse_xid_lines, text)
    except UnjudgeableOutput as exc:
        assert "\n" not in str(exc)
        return
    for event in events:
        assert isinstance(event.code, int) and event.code >= 0


# -- loaders ---------------------------------------------------------------------------------


@FUZZ
@given(doc=INVENTORIES)
def test_inventory_loader_accepts_or_names_the_problem(doc) -> None:
    try:
        specs = _timed(parse_inventory, _yaml_text(doc), "inv.yaml", {"h100-sxm"})
    except InventoryError as exc:
        _one_line_error(exc)
        assert str(exc).startswith("inv.yaml:")
        return
    for spec in specs:  # what is accepted is safe to hand to a shell, a scheduler, a workflow id
        from fleetctl.executors.base import LABEL_VALUE_RE, NODE_NAME_RE

        assert NODE_NAME_RE.match(spec.name) and spec.profile == "h100-sxm"
        assert all(LABEL_VALUE_RE.match(v) for v in spec.labels.values())


@FUZZ
@given(text=st.text(max_size=500))
def test_inventory_loader_raw_text(text: str) -> None:
    try:
        parse_inventory(text, "inv.yaml")
    except InventoryError as exc:
        _one_line_error(exc)


@FUZZ
@given(selector=st.text(max_size=60))
def test_selector_parser_accepts_or_names_the_problem(selector: str) -> None:
    try:
        labels = parse_selector(selector)
    except InventoryError as exc:
        _one_line_error(exc)
        return
    assert all("," not in k + v and "=" not in k + v for k, v in labels.items())


@FUZZ
@given(text=st.text(max_size=20))
def test_duration_parser_accepts_or_names_the_problem(text: str) -> None:
    try:
        assert parse_duration(text).total_seconds() > 0
    except ValueError as exc:
        _one_line_error(exc)


@FUZZ
@given(doc=RUNBOOKS)
# Found by the fuzzer once: a step named "\n" put a line break into the one-line error.
@example(doc={"name": "rb", "match": {"xid": [79]}, "steps": [{"name": "\n", "action": "bogus"}]})
def test_runbook_loader_accepts_or_names_the_problem(doc) -> None:
    try:
        _timed(parse_runbook, _yaml_text(doc), "rb.yaml")
    except RunbookError as exc:  # TemplateRefused is a RunbookError
        _one_line_error(exc)
        assert str(exc).startswith("rb.yaml:")


@FUZZ
@given(doc=st.one_of(DOCUMENTS, st.fixed_dictionaries({"name": SCALARS, "checks": st.lists(DOCUMENTS, max_size=4)})))
def test_suite_loader_accepts_or_names_the_problem(doc, tmp_path_factory) -> None:
    directory = tmp_path_factory.mktemp("suites")
    (directory / "fuzzed.yaml").write_text(_yaml_text(doc))
    try:
        _timed(load_suites, directory)
    except SuiteError as exc:
        _one_line_error(exc)
        assert "fuzzed.yaml" in str(exc)


@FUZZ
@given(
    doc=st.one_of(
        DOCUMENTS,
        st.fixed_dictionaries(
            {"name": SCALARS, "profiles": st.dictionaries(st.sampled_from(["h100-sxm", "nope"]), DOCUMENTS, max_size=2)}
        ),
    )
)
def test_firmware_baseline_loader_accepts_or_names_the_problem(doc) -> None:
    try:
        _timed(firmware.parse_baseline, _yaml_text(doc), "baseline.yaml", {"h100-sxm"})
    except firmware.BaselineError as exc:
        _one_line_error(exc)
        assert str(exc).startswith("baseline.yaml:")


@FUZZ
@given(doc=DOCUMENTS)
def test_config_file_accepts_or_names_the_problem(doc, tmp_path_factory) -> None:
    path = tmp_path_factory.mktemp("config") / "config.yaml"
    path.write_text(_yaml_text(doc))
    try:
        load_settings(env={}, config_file=path)
    except ConfigError as exc:
        _one_line_error(exc)
