"""Every recorded history replays on today's workflow code: a change that would break the
workflows running in a fleet right now fails here (re-record with tests/replay/record.py
only when the break is intended and nothing old is running)."""

from __future__ import annotations

from pathlib import Path

import pytest
from temporalio.client import WorkflowHistory
from temporalio.worker import Replayer

from workflows.worker import WORKFLOWS

HISTORIES = sorted((Path(__file__).resolve().parents[1] / "histories").glob("*.json"))


def test_histories_are_recorded_for_every_long_running_workflow() -> None:
    names = {p.stem for p in HISTORIES}
    assert {"node_lifecycle_drain_undrain", "capacity_guard", "active_check_sweep"} <= names


@pytest.mark.parametrize("path", HISTORIES, ids=[p.stem for p in HISTORIES])
async def test_history_replays(path: Path) -> None:
    history = WorkflowHistory.from_json(path.stem, path.read_text())
    await Replayer(workflows=WORKFLOWS).replay_workflow(history)
