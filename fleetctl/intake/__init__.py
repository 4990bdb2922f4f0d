"""`fleetctl events serve`: health events from the systems operators already run.

parse        Alertmanager webhook bodies, plain JSON events, Node Problem Detector node
             conditions -> IntakeEvent                                          (pure)
credentials  who may speak for which node: the operator token, per-node agent
             credentials kept hashed in a file; strict token files            (I/O: the file)
queue        one queue a node: critical events first across nodes, the nodes in turn,
             repeats merged, a bound per credential, a refusing node held     (pure)
delivery     Intake: accepted events de-duplicated, kept in a spool on disk and
             delivered a signal an event, a node's refusal holding that node only (I/O)
signals      the signals to the node workflows, Temporal's answers told apart   (I/O: Temporal)
server       the HTTP(S) endpoint (credentials, bounded bodies, header and body timeouts,
             a connection cap, batches split by node: the inventory's taken, others
             counted), the Kubernetes poller                                    (I/O)
heartbeats   agents' heartbeats, written to the database once a second          (I/O)
"""
