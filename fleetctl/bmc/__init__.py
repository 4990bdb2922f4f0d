"""Baseboard management controllers, reached through Redfish."""
