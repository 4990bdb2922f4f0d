"""The BMC of a simulated node (inventory `bmc: sim://NAME-bmc`): a reset reboots the node,
curing what a real reboot cures and giving it a new boot id; a firmware update clears its
firmware drift. It answers at once and, like a real BMC on its own management network, even
when the node's operating system is unreachable."""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Sequence

from sqlalchemy.engine import Engine

from fleetctl.bmc.base import RESET_TYPES
from fleetctl.checks.transcript import section
from fleetctl.sim import store
from fleetctl.sim.faults import CURED_BY


class SimBmc:
    def __init__(self, engine: Engine, node: str, now: Callable[[], float] = time.time) -> None:
        self.engine = engine
        self.node = node
        self._now = now

    def __repr__(self) -> str:
        return f"SimBmc({self.node!r})"

    def reboot(self, reset_type: str, timeout_s: float, poll_s: float) -> None:
        if reset_type not in RESET_TYPES:
            raise ValueError(f"unknown Redfish ResetType {reset_type!r}")
        store.cure(self.engine, self.node, CURED_BY["reboot"])
        store.record_boot(self.engine, self.node, self._now())

    def update_firmware(self, image_uri: str, targets: Sequence[str], timeout_s: float) -> None:
        store.cure(self.engine, self.node, CURED_BY["firmware_update"])

    def firmware_report(self, timeout_s: float) -> str:
        return ""  # the simulated firmware (VBIOS, ConnectX) is the node's, read by its checks

    def health_report(self, kind: str) -> str:
        """A healthy chassis in Redfish's form (the Thermal of sushy-tools' emulator, a Power
        of two supplies, an empty system event log): the simulated faults are all inside
        the node."""
        if kind == "sensors":
            return section("thermal 1", json.dumps(_THERMAL) + "\n") + section("power 1", json.dumps(_POWER) + "\n")
        return section("log 1 SEL", json.dumps({"Members@odata.count": 0, "Members": []}) + "\n")


_OK = {"State": "Enabled", "Health": "OK"}
_THERMAL = {
    "@odata.type": "#Thermal.v1_3_0.Thermal",
    "Id": "Thermal",
    "Temperatures": [
        {
            "MemberId": "0",
            "Name": "CPU Temp",
            "Status": _OK,
            "ReadingCelsius": 41,
            "UpperThresholdNonCritical": 42,
            "UpperThresholdCritical": 45,
            "UpperThresholdFatal": 48,
        },
        {
            "MemberId": "1",
            "Name": "Chassis Intake Temp",
            "Status": _OK,
            "ReadingCelsius": 25,
            "UpperThresholdNonCritical": 30,
            "UpperThresholdCritical": 40,
            "LowerThresholdCritical": 5,
        },
    ],
    "Fans": [
        {"MemberId": "0", "Name": "BaseBoard System Fan", "Status": _OK, "Reading": 2100, "LowerThresholdFatal": 0}
    ],
}
_POWER = {
    "@odata.type": "#Power.v1_5_1.Power",
    "Id": "Power",
    "PowerSupplies": [{"MemberId": str(i), "Name": f"PSU{i}", "Status": _OK, "LineInputVoltage": 227} for i in (1, 2)],
}
