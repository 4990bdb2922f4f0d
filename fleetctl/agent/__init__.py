"""`fleetctl agent`: a process on each node that follows the kernel log, samples GPU health,
and sends what it finds to the node's workflow. It needs no database.

    records   kernel log records (kmsg, journal JSON, plain lines) -> KernelRecord    (pure)
    detect    a record's message -> the faults the checks/ catalog recognises         (pure)
    sampler   nvidia-smi output -> the findings that changed since the last sample    (pure)
    node_watch IB ports (sysfs), mounts, stuck processes (procfs) -> findings     (I/O)
    follow    the sources: /dev/kmsg, `journalctl -k -f -o json`, a rotating file    (I/O)
    coalesce  a batch's repeated minor events -> one event each, with a count           (pure)
    spool     the bounded on-disk queue of events not yet delivered                   (I/O)
    transport the one place that speaks to Temporal                                  (I/O)
    runner    the loop that ties them together, and its Prometheus health             (I/O)
"""
