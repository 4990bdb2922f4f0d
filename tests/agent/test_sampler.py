"""GPU samples send an event on a change, not on every sample."""

from __future__ import annotations

from fleetctl.agent.sampler import SampleTracker
from tests.conftest import FIXTURES

NVSMI = FIXTURES / "checks" / "nvidia_smi"


def test_a_finding_is_sent_once_while_it_lasts_and_again_when_it_returns() -> None:
    ok = (NVSMI / "csv_8xh100_ok.txt").read_text()
    bad = (NVSMI / "csv_8xh100_remap_failure_fail.txt").read_text()
    t = SampleTracker("h100-sxm")
    assert t.observe(ok) == []
    first = t.observe(bad)
    assert first and any("remap" in message.lower() for _, message in first)
    assert t.observe(bad) == []  # unchanged: nothing new
    assert t.observe(ok) == []
    again = t.observe(bad)
    assert [m for _, m in again] == [m for _, m in first] and {k for k, _ in again}.isdisjoint(k for k, _ in first)


def test_a_gpu_missing_from_the_profile_count_is_a_finding() -> None:
    t = SampleTracker("h100-sxm")
    found = t.observe((NVSMI / "csv_7xh100_missing_gpu_fail.txt").read_text())
    assert any("7" in m and "8" in m for _, m in found), found


def test_output_that_cannot_be_judged_is_one_event_until_it_changes() -> None:
    t = SampleTracker(None)
    assert len(t.observe("nvidia-smi: FileNotFoundError")) == 1
    assert t.observe("nvidia-smi: FileNotFoundError") == []
