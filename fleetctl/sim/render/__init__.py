"""What a simulated node's tools print: one module per parser in `checks`.

Pure functions of a `fleetctl.sim.node.NodeState` (and a random generator for run-to-run
jitter). Layouts follow the real tools' output byte for byte where parsers depend on it
(column widths, comment lines, footers), so the parsers in `checks` read simulated output
exactly as they read a real node's.
"""
