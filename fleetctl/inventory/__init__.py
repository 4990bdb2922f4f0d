"""What the fleet is: the inventory an operator writes, the names and labels it may use, and
the fabric it describes. Every module is a decision (pure); the database stores what
`parse` accepted (fleetctl.db.queries).

    parse      the YAML inventory, every entry validated before anything is written   (pure)
    names      the alphabet of node names and labels, scheduler kinds                  (pure)
    hostlist   Slurm's host lists, read and written as scontrol does                   (pure)
    topology   switches and islands, Slurm's topology.conf                             (pure)
    machines   one name per machine: no address or BMC under two node names            (pure)
    fabric     ibnetdiscover's leaves, spines, islands; NVLink domains from nvidia-smi;
               where the inventory disagrees; Slurm blocks, Kubernetes labels         (pure)

May import: fleetctl.text and checks only. Entry point: `parse.parse_inventory`.
"""
