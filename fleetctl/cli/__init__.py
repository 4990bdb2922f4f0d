"""The `fleetctl` command line: one Typer module per noun."""
