"""GPU samples send an event on a change, not on every sample; a critical finding only once
consecutive samples agree, and not within the grace after the boot or the driver's load."""

from __future__ import annotations

import pytest

from fleetctl.agent.sampler import Confirmation, SampleTracker
from tests.conftest import FIXTURES

NVSMI = FIXTURES / "checks" / "nvidia_smi"
OK = (NVSMI / "csv_8xh100_ok.txt").read_text()
MISSING = (NVSMI / "csv_7xh100_missing_gpu_fail.txt").read_text()  # 7 of 8 GPUs: critical
WARM = (NVSMI / "csv_8xh100_sw_thermal_warn.txt").read_text()  # a warning: drains nothing
BOOTED = 1_000_000.0  # when the GPUs came up (the boot)
LATER = BOOTED + 3600.0  # long past any grace
AT_ONCE = Confirmation(samples=1, grace_s=0.0)


def observe_all(tracker: SampleTracker, samples: list[str], start: float = LATER, every_s: float = 5.0) -> list[list]:
    """What each sample reports, the samples `every_s` apart from `start`."""
    return [
        [f.severity for f in tracker.observe(text, now=start + i * every_s, settled_at=BOOTED)]
        for i, text in enumerate(samples)
    ]


@pytest.mark.parametrize(
    ("confirmation", "samples", "reported"),
    [
        # The default: the finding and one re-sample. Missing once, then whole: never reported.
        (Confirmation(), [OK, MISSING, OK, OK], [[], [], [], []]),
        (Confirmation(), [OK, MISSING, MISSING, MISSING], [[], [], ["critical"], []]),
        # A miss between two sightings starts the count again.
        (Confirmation(), [MISSING, OK, MISSING, MISSING], [[], [], [], ["critical"]]),
        (Confirmation(samples=3), [MISSING, MISSING, MISSING], [[], [], ["critical"]]),
        (AT_ONCE, [MISSING], [["critical"]]),
        # A warning drains nothing: sent at first sight.
        (Confirmation(), [WARM], [["warning"]]),
    ],
)
def test_a_sampled_critical_finding_is_reported_once_consecutive_samples_agree(confirmation, samples, reported) -> None:
    assert observe_all(SampleTracker("h100-sxm", confirmation=confirmation), samples) == reported


def test_no_sampled_critical_finding_within_the_grace_after_the_gpus_came_up() -> None:
    grace = Confirmation(samples=2, grace_s=120.0)
    t = SampleTracker("h100-sxm", confirmation=grace)
    # Every sample agrees, but the first three are within 2 minutes of the boot (at 0, 50, 100 s).
    assert observe_all(t, [MISSING] * 4, start=BOOTED, every_s=50.0) == [[], [], [], ["critical"]]
    assert not t.unconfirmed
    t = SampleTracker("h100-sxm", confirmation=grace)
    assert observe_all(t, [MISSING], start=BOOTED) == [[]]
    assert t.unconfirmed  # the agent samples again soon


def test_a_finding_is_sent_once_while_it_lasts_and_again_when_it_returns() -> None:
    bad = (NVSMI / "csv_8xh100_remap_failure_fail.txt").read_text()
    t = SampleTracker("h100-sxm", confirmation=AT_ONCE)
    assert t.observe(OK, now=LATER, settled_at=BOOTED) == []
    first = t.observe(bad, now=LATER, settled_at=BOOTED)
    assert first and any("remap" in f.message.lower() for f in first)
    assert t.observe(bad, now=LATER, settled_at=BOOTED) == []  # unchanged: nothing new
    assert t.observe(OK, now=LATER, settled_at=BOOTED) == []
    again = t.observe(bad, now=LATER, settled_at=BOOTED)
    assert [f.message for f in again] == [f.message for f in first]
    assert {f.key for f in again}.isdisjoint(f.key for f in first)


def test_a_gpu_missing_from_the_profile_count_is_a_finding() -> None:
    t = SampleTracker("h100-sxm", confirmation=AT_ONCE)
    found = t.observe(MISSING, now=LATER, settled_at=BOOTED)
    (missing,) = [f for f in found if "7" in f.message and "8" in f.message]
    assert missing.severity == "critical"  # a GPU gone: the node drains as for a critical Xid


def test_output_that_cannot_be_judged_is_one_event_until_it_changes() -> None:
    t = SampleTracker(None)
    (unjudged,) = t.observe("nvidia-smi: FileNotFoundError", now=LATER, settled_at=BOOTED)
    assert unjudged.severity == "info"  # says nothing about the GPUs: never drains
    assert t.observe("nvidia-smi: FileNotFoundError", now=LATER, settled_at=BOOTED) == []
