"""What `fleetctl validate` prints for each verdict (the table view of -o json's fields)."""

from __future__ import annotations

import pytest
from rich.console import Console

from fleetctl.cli.validate import _table

NODES = [f"gpu-{i:03d}" for i in range(1, 9)]
RUN = {"nodes": "gpu-[001-008]", "verdict": "slow", "busbw_gbps": 225.72, "reason": "", "check_run_id": 7}


def shown(**verdict) -> str:
    data = {"nodes": NODES, "skipped": {}, "runs": [RUN], "bad_nodes": [], "slow_together": []}
    data |= {"unresolved": [], "error": "", "passed": False, "drained": [], "kept": {}, **verdict}
    console = Console(width=200, record=True)
    console.print(_table(data, False))
    return console.export_text()


@pytest.mark.parametrize(
    ("verdict", "line"),
    [
        ({"bad_nodes": ["gpu-005"]}, "1 run; slow node: gpu-005"),
        ({"bad_nodes": ["gpu-002", "gpu-005"]}, "slow nodes: gpu-[002,005]"),
        (
            {"slow_together": [[NODES[:4], NODES[4:]]]},
            "slow only together (the fabric between): gpu-[001-004] | gpu-[005-008]",
        ),
        ({"unresolved": [NODES]}, "slow, no node to compare with: gpu-[001-008]"),
        (
            {"bad_nodes": ["gpu-002", "gpu-005"], "drained": ["gpu-002"], "kept": {"gpu-005": "the guard said no"}},
            "slow nodes: gpu-[002,005]; drained: gpu-002; not drained gpu-005: the guard said no",
        ),
        ({"error": "no verdict after 5 runs (the limit is 5)"}, "error: no verdict after 5 runs (the limit is 5)"),
        ({"passed": True}, "passed: 8 nodes at or above the multi-node floor"),
    ],
)
def test_each_verdict_in_one_line_under_the_runs(verdict: dict, line: str) -> None:
    text = shown(**verdict)
    assert "8 nodes held: gpu-[001-008]" in text and "gpu-[001-008]  slow     225.72" in text
    assert text.rstrip().splitlines()[-1].strip().endswith(line)
