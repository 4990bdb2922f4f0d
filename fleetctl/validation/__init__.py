"""Validation at cluster scale: one all-reduce across many nodes, judged against the profile's
multi-node floor, and when it falls short, the bisection that names the node or link
responsible. Every module is a decision (pure); the runs themselves are the activities of
workflows/activities/validation.py, the workflow workflows/definitions/validation.py.

    bisect     which runs come next given the runs done; what they name             (pure)
    scope      which production nodes a validation runs across                      (pure)

May import: fleetctl.inventory's decisions. Entry point: `bisect.next_step`.
"""
