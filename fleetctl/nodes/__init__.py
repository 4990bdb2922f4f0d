"""A node's life and the decisions about it: the state machine, the capacity guard, what an
event means, when a node is suspect, and how its health reads to an operator.

    lifecycle          states, triggers, who may fire them: `next_state`              (pure)
    capacity           the capacity guard's decision over a fleet snapshot: `decide`  (pure)
    health             what an XID or a failure signature means, when repeats escalate (pure)
    reachability       when a node checks cannot reach, or whose agent is silent, is suspect (pure)
    conditions         kubectl-style conditions and the HEALTH word                   (pure)
    search_attributes  what a node's workflow shows of itself in Temporal             (pure)
    fleet_status       nodes per state and rack, the racks by island                  (pure)
    stalls             when a node's workflow is stalled: failing tasks, old queued work (pure)
    event_groups       the automation's repeats collapsed, with count and first/last seen (pure)
    incident_screen    `fleet status --watch` fitted to the terminal: who needs an operator (pure)
    gpu_quarantine     whether a fault takes one GPU out, or the node: `decide_scope` (pure)
    gpu_return         what a GPU out needs before it returns, and a return's verdict (pure)
    view_store         the rows `node list` / `node show` print, from the database    (edge)
    fleet_status_store `fleet status`, from the database                              (edge)
    scheduler_sync     where fleetctl and the schedulers disagree, and the fixes      (edge)

May import: fleetctl.inventory, checks; the edges also fleetctl.db, fleetctl.schedulers and
other domains' decisions. Never workflows, the CLI or fleetctl.connections. Entry point:
`lifecycle.next_state`, which every state change goes through (inside NodeLifecycle).
"""
