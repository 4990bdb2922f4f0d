"""Activities, one module per area: small, idempotent, the only place workflows reach the
database, the nodes, the schedulers and the BMCs. They import workflows.api and what lies
below workflows, never the client module or a workflow definition (pyproject.toml's
contracts say so)."""
