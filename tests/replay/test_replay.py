"""Every recorded history replays on today's workflow code: a change that would break the
workflows running in a fleet right now fails here (re-record with tests/replay/record.py
only when the break is intended and nothing old is running).

v2 was recorded with the patches of its day and takes every patched branch; v3 to v5 take the
branches patched since (the marker test holds the sets together to every patch in the code: new
branches are deterministic too); v6 was recorded after the patches of v2's day were deprecated
(docs/decisions/0023-retiring-patches.md says when a patch goes); v7 holds the cluster validation, v8
the hung-job judge (the workflow types added since), v9 the single-GPU quarantine's patched branch,
v10 the GPU returns (GpuReturns), v11 the guard's question with its facts read at once (its
earlier update, request_removal, is replayed from v2 to v10) and v12 the critical path's short
steps as local activities (quick-steps-local)."""

from __future__ import annotations

import ast
import functools
import json
from pathlib import Path

import pytest
import yaml
from temporalio.client import WorkflowHistory
from temporalio.worker import Replayer

from fleetctl.workflows.worker import WORKFLOWS
from tests.replay.record import HISTORIES as HISTORIES_ROOT
from tests.replay.record import PATCH_INDEX, SETS, WORKFLOW_IDS, patch_marker_details, patch_markers

ROOT = Path(__file__).resolve().parents[2]
# The sets recorded whole, every long-running workflow type in each; the others hold new branches only.
WHOLE_SETS = ("v2", "v6")
# The most `workflow.patched` ids the code may carry: each is an old branch kept for runs that
# may still take it, and a patch is retired (deprecate_patch) once none can.
MAX_PATCHES = 10
HISTORIES = sorted(p for directory in SETS.values() for p in directory.glob("*.json") if p.name != PATCH_INDEX)
WORKFLOW_SOURCES = ROOT / "workflows"


@functools.cache
def _history(path: Path) -> WorkflowHistory:
    """The history under the workflow id it ran with (recorded beside it); read and parsed
    once per session, though several tests read every history."""
    ids = path.parent / WORKFLOW_IDS
    workflow_id = (yaml.safe_load(ids.read_text()) if ids.exists() else {}).get(path.stem, path.stem)
    return WorkflowHistory.from_json(workflow_id, path.read_text())


def _label(path: Path) -> str:
    return str(path.relative_to(HISTORIES_ROOT).with_suffix(""))


def patched_ids_in_source(
    directory: Path = WORKFLOW_SOURCES, calls: tuple[str, ...] = ("patched", "deprecate_patch")
) -> dict[str, str]:
    """Every literal id passed to `workflow.patched(...)` or `deprecate_patch` (those in
    `calls`) under `directory`, with where it is; a non-literal id is an error (it could not be
    checked)."""
    found: dict[str, str] = {}
    for path in sorted(directory.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in calls):
                continue
            (arg,) = node.args
            if not (isinstance(arg, ast.Constant) and isinstance(arg.value, str)):
                raise AssertionError(f"{path}:{node.lineno}: a patch id must be a string literal")
            found.setdefault(arg.value, f"{path.relative_to(ROOT)}:{node.lineno}")
    return found


def test_histories_are_recorded_for_every_long_running_workflow() -> None:
    names = {p.stem for p in SETS["v6"].glob("*.json")}
    assert {"node_lifecycle_drain_undrain", "capacity_guard", "active_check_sweep"} <= names


def test_the_whole_sets_are_recorded_for_every_workflow_type() -> None:
    for name, directory in ((n, SETS[n]) for n in WHOLE_SETS):
        types = {
            _history(p).events[0].workflow_execution_started_event_attributes.workflow_type.name
            for p in HISTORIES
            if p.parent == directory
        }
        assert {"NodeLifecycle", "CapacityGuard", "ActiveCheckSweep", "Remediation", "JobRestart"} <= types, name


def test_every_workflow_the_worker_runs_has_a_recorded_history() -> None:
    """A workflow type with no history could change under running workflows unseen."""
    types = {_history(p).events[0].workflow_execution_started_event_attributes.workflow_type.name for p in HISTORIES}
    assert sorted(w.__name__ for w in WORKFLOWS if w.__name__ not in types) == []


def test_at_most_ten_patches_keep_old_branches() -> None:
    patched = patched_ids_in_source(calls=("patched",))
    assert len(patched) <= MAX_PATCHES, f"{len(patched)} patched ids: retire the oldest (deprecate_patch)"


def test_a_deprecated_patch_is_not_also_patched() -> None:
    """An id is either kept (patched: both branches) or retired (deprecate_patch: the new one)."""
    both = set(patched_ids_in_source(calls=("patched",))) & set(patched_ids_in_source(calls=("deprecate_patch",)))
    assert both == set()


def test_the_newest_whole_set_records_the_retired_patches_as_deprecated() -> None:
    """v6 was recorded after the retirement: its markers of a retired id are deprecated ones,
    which a replay skips, so the calls can go (step two) without breaking it."""
    retired = set(patched_ids_in_source(calls=("deprecate_patch",)))
    live = {
        detail["id"]
        for p in HISTORIES
        if p.parent == SETS["v6"]
        for detail in patch_marker_details(_history(p))
        if detail["id"] in retired and not detail.get("deprecated")
    }
    assert live == set()


def test_the_source_scan_finds_the_patches() -> None:
    """The scan itself: a known patch in a known place, so an empty scan cannot pass below."""
    ids = patched_ids_in_source()
    assert "firmware-phase" in ids and ids["firmware-phase"].startswith("workflows/definitions/node_lifecycle.py:")


@pytest.mark.parametrize("name", ["v2", "v3", "v6"])
def test_the_patch_index_says_what_each_history_recorded(name: str) -> None:
    """The index beside a set (readable without decoding payloads) is the markers' truth."""
    index = json.loads((SETS[name] / PATCH_INDEX).read_text())
    assert index == {p.stem: sorted(patch_markers(_history(p))) for p in HISTORIES if p.parent == SETS[name]}


def test_every_patch_in_the_code_is_taken_by_a_recorded_history() -> None:
    recorded = set().union(*(patch_markers(_history(p)) for p in HISTORIES))
    missing = {pid: where for pid, where in patched_ids_in_source().items() if pid not in recorded}
    assert not missing, (
        f"patched ids no recorded history takes: {missing}; add a scenario to "
        "tests/replay/record.py (the newest set's recorder) and run `python -m tests.replay.record`"
    )


def test_both_of_the_guards_removal_updates_are_replayed() -> None:
    """The guard's current question and the one its runs answered before (kept for them, as a
    patch's old branch is: docs/decisions/0030) each appear in a recorded history."""
    from fleetctl.workflows.api import REQUEST_REMOVAL_UPDATE, STEPWISE_REQUEST_REMOVAL_UPDATE

    answered = {
        event.workflow_execution_update_accepted_event_attributes.accepted_request.input.name
        for path in HISTORIES
        for event in _history(path).events
        if event.HasField("workflow_execution_update_accepted_event_attributes")
    }
    assert {REQUEST_REMOVAL_UPDATE, STEPWISE_REQUEST_REMOVAL_UPDATE} <= answered


@pytest.mark.parametrize("path", HISTORIES, ids=[_label(p) for p in HISTORIES])
async def test_history_replays(path: Path) -> None:
    await Replayer(workflows=WORKFLOWS).replay_workflow(_history(path))
