"""Putting a node right: runbooks and the lemon rule, firmware baselines and roll-out plans,
RMA evidence bundles.

    runbooks   the YAML model, event matching, sandboxed templates, the lemon policy    (pure)
    firmware   baselines, drift, roll-out plans, firmware image URLs                   (pure)
    rma        the evidence bundle a vendor needs, as JSON and Markdown                (pure)
    templates/ the RMA bundle's Markdown

May import: fleetctl.jobs', fleetctl.nodes' and fleetctl.inventory's decisions, checks.
What runs them is workflows (Remediation, FirmwareRollout); the BMCs are fleetctl.bmc and
the webhook fleetctl.connections.webhook_client. Entry point: `runbooks.load_runbooks`, then
`runbooks.matches` per event.
"""
