"""One name per machine: no two node names for one address or one BMC.

Two names for one machine let fleetctl act on it twice over: adopted under a second name
while its first has an open RMA, it takes jobs; power-cycled through a BMC that another
name's grant covers, it goes down without a grant of its own. So an address or a BMC that
another node already has, in the same file or in the fleet, is refused, naming both.

An address is the machine whatever user logs in to it (`alice@h` and `h` are one host); a
BMC is its host and the Redfish system it serves, since one chassis BMC may serve several
systems (`https://bmc/redfish/v1/Systems/1` and `.../Systems/2` are two machines), and
scheme and case never make a BMC another one.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass


@dataclass(frozen=True)
class MachineIds:
    """What identifies a node's hardware: its address and (optional) BMC, as given."""

    name: str
    address: str
    bmc: str | None


def address_key(address: str) -> str:
    """The machine an SSH address reaches: the host (and port), whatever the user."""
    return address.rsplit("@", 1)[-1].lower()


def bmc_key(bmc: str) -> str:
    """The machine a BMC address manages: host and system path, without scheme, case or trailing '/'."""
    without_scheme = bmc.split("://", 1)[-1] if not bmc.lower().startswith("sim://") else bmc
    return without_scheme.rstrip("/").lower()


def machine_conflict(new: Iterable[MachineIds], known: Iterable[MachineIds] = ()) -> str | None:
    """The first address or BMC two names share, new with new or new with known, as one line; None if none.

    A known node named again in `new` is the same node (a re-import), not a second name."""
    new = list(new)
    renamed = {n.name.lower() for n in new}
    owners: dict[tuple[str, str], str] = {}
    for node in known:
        if node.name.lower() not in renamed:
            _claim(owners, node)
    for node in new:
        if clash := _claim(owners, node):
            return clash
    return None


def _claim(owners: dict[tuple[str, str], str], node: MachineIds) -> str | None:
    keys = [("address", address_key(node.address), node.address)]
    if node.bmc:
        keys.append(("bmc", bmc_key(node.bmc), node.bmc))
    for field, key, given in keys:
        owner = owners.setdefault((field, key), node.name)
        if owner.lower() != node.name.lower():
            return f"{node.name}: {field} {given} is already {owner}'s (one name per machine)"
    return None
