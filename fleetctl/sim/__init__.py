"""The GPU fleet simulator: nodes that answer the check catalog's commands in the real tools'
formats, a scheduler, a BMC and injected faults, for the demo, the benchmarks and the tests.

    faults      fault kinds and specs, and when each appears (pure)
    profiles    healthy values per GPU profile, from data/*.yaml
    node        a node's state at a moment, with its faults applied (pure)
    render/     what each tool prints, one module per parser in `checks` (pure)
    shell       argv parsing per tool, launchers, a tiny `sh -c`
    executor    the Executor for `sim://` nodes
    bmc         the BMC of a simulated node
    scheduler   the simulated scheduler (jobs in the database)
    store       injected faults in the database
    inventory   inventory entries for a simulated fleet

Production code reaches the simulator only through the executor, scheduler and BMC
registries, which choose it for `sim://` addresses and `scheduler: sim` nodes (an
import-linter contract in pyproject.toml keeps it so).
"""

# Inventory entries address simulated nodes (and their BMCs) as `sim://NAME`.
SIM_SCHEME = "sim://"
