"""What a quarantined GPU's Xid asks before its return (NVIDIA's catalog, checks/catalog/xid.tsv),
and what a return's outcome makes of it."""

from __future__ import annotations

import pytest

from fleetctl.nodes.gpu_return import ReturnStep, ReturnVerdict, due, judge_return, return_step


@pytest.mark.parametrize(
    ("code", "step", "said"),
    [
        (48, ReturnStep.RESET_THEN_CHECK, "WORKFLOW_XID_48"),  # DBE: NVIDIA's XID 48 workflow starts with a reset
        (64, ReturnStep.RESET_THEN_CHECK, "RESET_GPU"),  # the row remap that failed
        (94, ReturnStep.CHECK, "RESTART_APP"),  # a contained error: the application's to restart
        (63, ReturnStep.CHECK, "IGNORE"),  # a row marked for remapping
        (79, ReturnStep.LEAVE_OUT, "reboot"),  # fallen off the bus: the node's reboot
        (None, ReturnStep.LEAVE_OUT, "no Xid recorded"),
    ],
)
def test_the_catalog_s_action_decides_the_reset(code: int | None, step: ReturnStep, said: str) -> None:
    got, why = return_step(code)
    assert got is step and said in why


@pytest.mark.parametrize(
    ("failure", "before", "verdict", "said"),
    [
        ("", 0, ReturnVerdict.RETURN, "clean"),
        ("", 2, ReturnVerdict.RETURN, "clean"),  # failures before do not hold back a clean GPU
        ("dcgm-r1: memory", 0, ReturnVerdict.KEEP_OUT, "return 1 of 3 failed: dcgm-r1: memory"),
        ("dcgm-r1: memory", 1, ReturnVerdict.KEEP_OUT, "return 2 of 3 failed"),
        ("dcgm-r1: memory", 2, ReturnVerdict.DRAIN_NODE, "return 3 of 3 failed: dcgm-r1: memory; the node"),
        ("dcgm-r1: memory", 5, ReturnVerdict.DRAIN_NODE, "return 6 of 3 failed"),  # a drain the guard held
    ],
)
def test_a_return_s_outcome(failure: str, before: int, verdict: ReturnVerdict, said: str) -> None:
    outcome = judge_return(failure, before, 3)
    assert outcome.verdict is verdict and said in outcome.reason


def test_a_gpu_is_due_once_settled() -> None:
    assert not due(1799.0, 1800.0) and due(1800.0, 1800.0) and due(0.0, 0.0)
