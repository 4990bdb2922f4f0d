"""The simulated fleet of the remediation tests, reused for roll-outs."""

from tests.remediation.conftest import fleet_settings  # noqa: F401
