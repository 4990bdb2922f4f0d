"""The GPU reset runbook (runbooks/xid-reset-gpu.yaml) sends a node to RMA on its memory's
failure only: a remap that did not take, uncorrectable errors back after the reset, spare rows
run out. A warning, a hot GPU, a missing GPU or an output that cannot be judged goes back
through burn-in, which judges the whole node again. Judged here from real nvidia-smi outputs
(tests/fixtures/checks/nvidia_smi, each citing its source) through the check the runbook runs
and the runbook's own conditions, as the Remediation workflow evaluates them."""

from __future__ import annotations

import pytest

from fleetctl.checks import judge
from fleetctl.remediation.runbooks import load_runbooks
from fleetctl.remediation.sandbox import evaluate
from tests.conftest import FIXTURES

NVSMI = FIXTURES / "checks" / "nvidia_smi"
BOOK = load_runbooks()["xid-reset-gpu"]
RECHECK = next(s for s in BOOK.steps if s.name == "recheck")


def ladder_after(output: str) -> str:
    """Where the runbook sends the node when the recheck's nvidia-smi answers `output`: the
    step's outcome as the workflow makes it (passed when the status is one it expects, else
    failed, its detail `CHECK: STATUS: REASON`), then the first later step whose `when` holds."""
    check = RECHECK.params["check"]
    result = judge(check, output, "h100-sxm")
    passed = result.status.value in RECHECK.params["expect"]
    detail = f"{check}: {result.status.value}: {result.reason}"
    context = {"steps": {"recheck": {"status": "passed" if passed else "failed", "detail": detail}}}
    later = BOOK.steps[BOOK.steps.index(RECHECK) + 1 :]
    taken = [s for s in later if s.when is None or evaluate(s.when, context)]
    return taken[0].params.get("state", taken[0].action) if taken else "stays for an operator"


@pytest.mark.parametrize(
    ("fixture", "where"),
    [
        ("csv_8xh100_ok.txt", "burn_in"),
        ("csv_8xh100_remap_failure_fail.txt", "rma"),  # the remap did not take
        ("csv_8xh100_uncorrectable_ecc_fail.txt", "rma"),  # uncorrectable errors since the reset
        ("q_8xh100_dbe_volatile_fail.txt", "rma"),
        ("q_8xh100_remap_pending_fail.txt", "rma"),  # still pending after the reset that activates it
        ("q_8xh100_hw_slowdown_fail.txt", "burn_in"),  # a hot GPU: a fail, not the memory's
        ("csv_8xh100_sw_thermal_warn.txt", "burn_in"),
        ("csv_8xh100_hot_warn.txt", "burn_in"),
        ("q_gh200_lifetime_remap_warn.txt", "burn_in"),  # a memory warning: serviceable
        ("csv_8xh100_pcie_x8_warn.txt", "burn_in"),
        ("csv_7xh100_missing_gpu_fail.txt", "burn_in"),  # burn-in's to judge, not the vendor's
        ("csv_gpu_lost_fail.txt", "burn_in"),  # nothing readable about the memory
    ],
)
def test_the_reset_runbook_sends_only_a_failed_memory_to_rma(fixture, where) -> None:
    assert ladder_after((NVSMI / fixture).read_text()) == where


def test_a_recheck_that_could_not_run_sends_the_node_nowhere() -> None:
    """The node not out of service (the step failed before any check ran): no RMA on no evidence."""
    context = {"steps": {"recheck": {"status": "failed", "detail": "the node is draining, not in maintenance"}}}
    later = BOOK.steps[BOOK.steps.index(RECHECK) + 1 :]
    assert [s.action for s in later if s.when is None or evaluate(s.when, context)] == []
