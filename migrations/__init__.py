"""fleetctl's Alembic migrations, shipped inside the distribution so an installed fleetctl
finds its schema (fleetctl.db.engine reads this package's directory, never the checkout's)."""
