"""Which of a job's nodes a restart moves it off. Pure."""

from __future__ import annotations

from typing import Iterable, Mapping

from fleetctl.lifecycle import NodeState


def nodes_to_leave(job_nodes: Iterable[str], node_states: Mapping[str, str]) -> list[str]:
    """The job's nodes that fleetctl has out of production, in the job's order. A node fleetctl
    does not manage (absent from `node_states`) is not chosen: nothing says it is bad."""
    return [n for n in job_nodes if n in node_states and not NodeState(node_states[n]).in_service]


def not_in_job(job_nodes: Iterable[str], named: Iterable[str]) -> list[str]:
    """The nodes an operator named that the job does not run on."""
    job_nodes = set(job_nodes)
    return [n for n in named if n not in job_nodes]
