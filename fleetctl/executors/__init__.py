"""How a command reaches a node: over SSH, or on a simulated node."""
