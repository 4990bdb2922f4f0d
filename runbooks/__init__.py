"""The shipped remediation runbooks (the YAML files beside this module), a package so an
installed fleetctl finds them (fleetctl.remediation.runbooks.RUNBOOKS_DIR)."""
