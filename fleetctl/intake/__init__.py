"""`fleetctl events serve`: health events from the systems operators already run.

parse   Alertmanager webhook bodies, plain JSON events, Node Problem Detector node
        conditions -> IntakeEvent                                               (pure)
credentials  who may speak for which node: the operator token, per-node agent
             credentials kept hashed in a file; strict token files                (I/O: the file)
server  the HTTP(S) endpoint (credentials, bounded bodies, header and body timeouts,
        a connection cap, inventory names only), the Kubernetes watcher,
        de-duplication and batching into signals                                 (I/O)
"""
