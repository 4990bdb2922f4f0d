"""The one interface fleetctl's workflows use to act on a node through its BMC, and the error
every implementation raises. Redfish (fleetctl.bmc.redfish) is the real one; a simulated
node's BMC is in fleetctl.sim.bmc. `fleetctl.bmc.bmc_for` picks one by the BMC address."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

# Redfish ResetType values (Resource schema); anything else is a caller's mistake.
RESET_TYPES = frozenset(
    {
        "On",
        "ForceOff",
        "GracefulShutdown",
        "GracefulRestart",
        "ForceRestart",
        "Nmi",
        "ForceOn",
        "PushPowerButton",
        "PowerCycle",
        "FullPowerCycle",
        "Suspend",
        "Pause",
        "Resume",
    }
)


class BmcError(Exception):
    """The BMC refused or failed a request. The message is one readable line."""


class BootNotSeen(BmcError):
    """The BMC accepted the reset but showed no boot within the timeout: a BMC that reports no
    boot identity and whose Off was too short for a poll to see, or a reset that did nothing.
    Only the node itself can say which (its boot id)."""


class Bmc(Protocol):
    def reboot(self, reset_type: str, timeout_s: float, poll_s: float) -> None:
        """Reset the node's system (a Redfish ResetType) and return once the BMC reports it
        booted again; BootNotSeen when the reset was accepted but no boot was seen within
        timeout_s, BmcError when the BMC refused. Whether the operating system answers again
        is the caller's to check."""
        ...

    def update_firmware(self, image_uri: str, targets: Sequence[str], timeout_s: float) -> None:
        """Apply a firmware image (to `targets`, or where the BMC decides when empty) and
        return once the update has completed; BmcError when it fails or runs past timeout_s."""
        ...

    def firmware_report(self, timeout_s: float) -> str:
        """The firmware the BMC itself reports (its own, the tray's), as text checks.firmware
        reads; empty when it reports none. BmcError when it cannot be read within timeout_s."""
        ...

    def health_report(self, kind: str) -> str:
        """The chassis' health documents for a check (checks/chassis.py), each under its
        transcript step: `sensors` (Thermal, Power) or `log` (every log service's entries);
        BmcError when the BMC cannot be read."""
        ...
