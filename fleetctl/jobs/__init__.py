"""Training jobs and their restarts: where a restarted job runs again, the hot spares each
island holds, the job history the figures read, and stragglers among a running job's nodes.

    placement      a restart's nodes: its island first, spares first, then the fleet;
                   which of a job's nodes it moves off                                 (pure)
    spares         which idle production nodes each island holds                      (pure)
    stragglers     production stragglers: PromQL, verdicts, when a drain is due       (pure)
    hang           hung jobs: late on their own cadence, GPUs idle or NCCL timed out,
                   and the node to blame                                              (pure)
    spares_sync    the pools kept in step: database and schedulers                    (edge)
    history_sync   jobs reconciled from their schedulers into the database           (edge)

May import: fleetctl.nodes' and fleetctl.inventory's decisions, checks; the edges also
fleetctl.db and fleetctl.schedulers. Entry point: `placement.place_restart`.
"""
