"""Baseboard management controllers: the Bmc interface (base), Redfish, and the choice of one
per node by its inventory `bmc` address."""

from __future__ import annotations

from typing import TYPE_CHECKING

from fleetctl.sim import SIM_SCHEME

if TYPE_CHECKING:
    from fleetctl.bmc.base import Bmc
    from fleetctl.config import Settings


def bmc_for(node: str, address: str, settings: Settings) -> Bmc:
    """The BMC at a node's inventory `bmc` address: `sim://...` is the simulated node's,
    anything else Redfish (https:// when the address has no scheme).

    Only the chosen implementation's module is imported. Raises ValueError for an address
    Redfish cannot use.
    """
    if address.startswith(SIM_SCHEME):
        from fleetctl.db.engine import get_engine
        from fleetctl.sim.bmc import SimBmc

        return SimBmc(get_engine(settings.db_url), node)
    from fleetctl.bmc.redfish import RedfishBmc, RedfishClient

    url = address if "://" in address else f"https://{address}"
    return RedfishBmc(
        RedfishClient(
            url,
            settings.bmc_username,
            settings.bmc_password,
            verify_tls=settings.bmc_verify_tls,
            allow_http=settings.bmc_allow_http,
        )
    )
