"""GPU health sampled every few seconds, judged by the same parser as the active checks;
only a finding that was not there in the previous sample becomes an event."""

from __future__ import annotations

from dataclasses import dataclass, field

from checks import Status, judge
from checks.catalog import CHECKS

NVIDIA_SMI_ARGV = CHECKS["nvidia-smi-query"].argv


@dataclass
class SampleTracker:
    """Remembers the findings of the last sample. A finding that goes and comes back is a
    new event (the id includes how many times it appeared this boot)."""

    profile: str | None
    current: set[tuple[str, str]] = field(default_factory=set)
    appearances: dict[tuple[str, str], int] = field(default_factory=dict)

    def observe(self, text: str) -> list[tuple[str, str]]:
        """The (key, message) of each finding new since the last sample; key is stable."""
        result = judge("nvidia-smi", text, self.profile)
        if result.status is Status.ERROR:
            found = {("error", result.reason)}
        else:
            found = {(f.where or "node", f.what) for f in result.findings if f.severity in ("fail", "warn")}
        new = sorted(found - self.current)
        self.current = found
        out = []
        for where, what in new:
            n = self.appearances[(where, what)] = self.appearances.get((where, what), 0) + 1
            out.append((f"nvidia-smi:{where}:{what}:{n}", f"nvidia-smi {where}: {what}"))
        return out
