"""GPU health sampled every few seconds (`nvidia-smi`, and `dcgmi health -c` where DCGM
runs), judged by the same parsers as the active checks; only a finding that was not there
in the previous sample becomes an event."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import NamedTuple

from checks import Status, judge
from checks.catalog import CHECKS

NVIDIA_SMI_ARGV = CHECKS["nvidia-smi-query"].argv


# A finding's severity as an event's: a `fail` is what the catalog calls critical
# (checks.signatures.FINDING_SEVERITY), the judgement that fails an active check; output
# that cannot be judged says nothing about the GPUs.
EVENT_SEVERITY = {"fail": "critical", "warn": "warning", "error": "info"}


class Sampled(NamedTuple):
    key: str  # stable: the same finding seen again in the same appearance has the same key
    message: str
    severity: str  # info | warning | critical


@dataclass
class SampleTracker:
    """Remembers the findings of the last sample. A finding that goes and comes back is a
    new event (the id includes how many times it appeared this boot)."""

    profile: str | None
    kind: str = "nvidia-smi"  # the checks/ kind that judges the tool's output
    profiles_dir: str | None = None  # the operator's site profiles (the `profiles_dir` setting)
    current: set[tuple[str, str]] = field(default_factory=set)
    appearances: dict[tuple[str, str], int] = field(default_factory=dict)

    def observe(self, text: str) -> list[Sampled]:
        """Each finding new since the last sample."""
        result = judge(self.kind, text, self.profile, self.profiles_dir)
        if result.status is Status.ERROR:
            found = {("error", result.reason): "error"}
        else:
            found = {(f.where or "node", f.what): f.severity for f in result.findings if f.severity in ("fail", "warn")}
        new = sorted(set(found) - self.current)
        self.current = set(found)
        out = []
        for where, what in new:
            n = self.appearances[(where, what)] = self.appearances.get((where, what), 0) + 1
            out.append(
                Sampled(
                    f"{self.kind}:{where}:{what}:{n}",
                    f"{self.kind} {where}: {what}",
                    EVENT_SEVERITY[found[(where, what)]],
                )
            )
        return out
