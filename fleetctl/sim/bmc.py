"""The BMC of a simulated node (inventory `bmc: sim://NAME-bmc`): a reset reboots the node,
curing what a real reboot cures and giving it a new boot id; a firmware update clears its
firmware drift. It answers at once and, like a real BMC on its own management network, even
when the node's operating system is unreachable."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence

from sqlalchemy.engine import Engine

from fleetctl.bmc.base import RESET_TYPES
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
