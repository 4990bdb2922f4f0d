"""fleetctl: the lifecycle manager for GPU training fleets."""

__version__ = "0.2.0"
