"""Temporal workflows, activities and the worker of fleetctl, in layers (each imports only
those below it; pyproject.toml's import-linter contracts enforce it):

- worker: hosts every workflow and activity on one task queue.
- definitions: the workflows (deterministic code), and `shared` for what several share.
- activities: one module per area; the only code that reaches the database, nodes,
  schedulers and BMCs. Never imports the client or a definition.
- client: what the CLI and other processes use to talk to workflows, by name.
- api: every payload, workflow id and message name; light (`fleetctl node event`).
"""
