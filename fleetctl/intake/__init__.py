"""`fleetctl events serve`: health events from the systems operators already run.

    parse   Alertmanager webhook bodies, plain JSON events, Node Problem Detector node
            conditions -> IntakeEvent                                               (pure)
    server  the HTTP endpoint (bearer token, bounded bodies), the Kubernetes watcher,
            de-duplication and batching into signals                                 (I/O)
"""
