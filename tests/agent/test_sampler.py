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
    assert first and any("remap" in f.message.lower() for f in first)
    assert t.observe(bad) == []  # unchanged: nothing new
    assert t.observe(ok) == []
    again = t.observe(bad)
    assert [f.message for f in again] == [f.message for f in first]
    assert {f.key for f in again}.isdisjoint(f.key for f in first)


def test_a_gpu_missing_from_the_profile_count_is_a_finding() -> None:
    t = SampleTracker("h100-sxm")
    found = t.observe((NVSMI / "csv_7xh100_missing_gpu_fail.txt").read_text())
    (missing,) = [f for f in found if "7" in f.message and "8" in f.message]
    assert missing.severity == "critical"  # a GPU gone: the node drains as for a critical Xid


def test_output_that_cannot_be_judged_is_one_event_until_it_changes() -> None:
    t = SampleTracker(None)
    (unjudged,) = t.observe("nvidia-smi: FileNotFoundError")
    assert unjudged.severity == "info"  # says nothing about the GPUs: never drains
    assert t.observe("nvidia-smi: FileNotFoundError") == []
