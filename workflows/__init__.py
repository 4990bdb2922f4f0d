"""Temporal workflows, activities and the worker of fleetctl."""
