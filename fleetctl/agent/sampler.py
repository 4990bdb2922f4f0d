"""GPU health sampled every few seconds (`nvidia-smi`, and `dcgmi health -c` where DCGM
runs), judged by the same parsers as the active checks; only a finding that was not there
in the previous sample becomes an event.

A critical finding is a reading, not the kernel's word: nvidia-smi racing a GPU reset or a
driver reload lists 7 of 8 GPUs once, and on every node of a fleet after a mass reboot. So
it becomes an event only once `Confirmation.samples` consecutive samples show it, and not
within `Confirmation.grace_s` of the boot or the driver's load (the kernel's own line for a
lost GPU, XID 79, still drains at once). Warnings, which drain nothing, go at first sight."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import NamedTuple

from fleetctl.checks import Status, judge
from fleetctl.checks.catalog import CHECKS

NVIDIA_SMI_ARGV = CHECKS["nvidia-smi-query"].argv
# The kernel's line when the NVIDIA driver loads ("NVRM: loading NVIDIA UNIX Open Kernel
# Module for x86_64  550.90.07 ..."): the GPUs are being initialised again from here.
DRIVER_LOADED = re.compile(r"NVRM: loading NVIDIA UNIX")


# A finding's severity as an event's: a `fail` is what the catalog calls critical
# (checks.signatures.FINDING_SEVERITY), the judgement that fails an active check; output
# that cannot be judged says nothing about the GPUs.
EVENT_SEVERITY = {"fail": "critical", "warn": "warning", "error": "info"}


class Sampled(NamedTuple):
    key: str  # stable: the same finding seen again in the same appearance has the same key
    message: str
    severity: str  # info | warning | critical
    signature: str = ""  # the checks/catalog/signatures.tsv row of a watched finding, "" for a tool's


@dataclass(frozen=True)
class Confirmation:
    """When a sampled critical finding is believed (the agent_sample_* settings)."""

    samples: int = 2  # consecutive samples that must show it (1: the first)
    grace_s: float = 120.0  # none believed this soon after the boot or the driver's load


@dataclass
class Debounce:
    """Which of a sample's findings become events: each new one, a critical (`fail`) one only
    once confirmed (`Confirmation`). A finding that goes and comes back is a new event (its
    appearance number, in the event's id, counts how many times it was reported)."""

    confirmation: Confirmation = Confirmation()
    streaks: dict[tuple[str, str], int] = field(default_factory=dict)  # consecutive samples each finding is in
    severities: dict[tuple[str, str], str] = field(default_factory=dict)  # the last sample's findings
    reported: set[tuple[str, str]] = field(default_factory=set)  # sent in their current appearance
    appearances: dict[tuple[str, str], int] = field(default_factory=dict)

    def settle(
        self, found: dict[tuple[str, str], str], *, now: float, settled_at: float
    ) -> list[tuple[tuple[str, str], int]]:
        """Each (where, what) of `found` (its finding severity: fail, warn, error) to report
        now, with its appearance number. `settled_at`: when the hardware last came up (the
        boot, the driver's load); no critical finding is believed before its grace after it."""
        # A finding missing from one sample starts again: confirmation is consecutive samples.
        self.streaks = {k: self.streaks.get(k, 0) + 1 for k in found}
        self.severities = found
        self.reported &= set(found)
        settled = now >= settled_at + self.confirmation.grace_s
        out = []
        for key in sorted(set(found) - self.reported):
            if found[key] == "fail" and not (settled and self.streaks[key] >= self.confirmation.samples):
                continue
            self.reported.add(key)
            self.appearances[key] = self.appearances.get(key, 0) + 1
            out.append((key, self.appearances[key]))
        return out

    @property
    def unconfirmed(self) -> bool:
        """Whether the last sample held a critical finding not yet believed (sample again soon)."""
        return any(s == "fail" and k not in self.reported for k, s in self.severities.items())


@dataclass
class SampleTracker:
    """Remembers the findings of the last sample of one tool, judged by its checks/ kind."""

    profile: str | None
    kind: str = "nvidia-smi"  # the checks/ kind that judges the tool's output
    profiles_dir: str | None = None  # the operator's site profiles (the `profiles_dir` setting)
    confirmation: Confirmation = Confirmation()
    debounce: Debounce = field(init=False)

    def __post_init__(self) -> None:
        self.debounce = Debounce(self.confirmation)

    def observe(self, text: str, *, now: float, settled_at: float) -> list[Sampled]:
        """Each finding to report now: new since the last sample, or a critical one confirmed
        by this sample (Debounce.settle)."""
        result = judge(self.kind, text, self.profile, self.profiles_dir)
        if result.status is Status.ERROR:
            found = {("error", result.reason): "error"}
        else:
            found = {(f.where or "node", f.what): f.severity for f in result.findings if f.severity in ("fail", "warn")}
        return [
            Sampled(
                f"{self.kind}:{where}:{what}:{n}", f"{self.kind} {where}: {what}", EVENT_SEVERITY[found[(where, what)]]
            )
            for (where, what), n in self.debounce.settle(found, now=now, settled_at=settled_at)
        ]

    @property
    def unconfirmed(self) -> bool:
        return self.debounce.unconfirmed
