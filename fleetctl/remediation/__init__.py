"""Putting a node right: runbooks and the lemon rule, firmware baselines and roll-out plans,
RMA evidence bundles.

    runbooks   the YAML model, its loading and validation                              (pure)
    matching   which runbook handles an event                                          (pure)
    actions    what each step's action takes, and the state change it asks for         (pure)
    sandbox    the Jinja2 sandbox a runbook's templates run in, and its bounds         (pure)
    events     what a runbook reacts to: the event kinds and the event                 (pure)
    drains     what a drain is for: the drain kinds, planned work or a fault           (pure)
    lemons     the lemon rule and its one figure, times remediated                     (pure)
    firmware   baselines, drift, roll-out plans, firmware image URLs                   (pure)
    rma        the evidence bundle a vendor needs, as JSON and Markdown                (pure)
    templates/ the RMA bundle's Markdown

May import: fleetctl.jobs', fleetctl.nodes' and fleetctl.inventory's decisions, checks.
What runs them is workflows (Remediation, FirmwareRollout); the BMCs are fleetctl.bmc and
the webhook fleetctl.connections.webhook_client. Entry point: `runbooks.load_runbooks`, then
`matching.runbook_for` per event.
"""
