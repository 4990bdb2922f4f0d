"""End to end: the catalog's commands run over SSH on the fake node, judged by the parsers."""

from __future__ import annotations

import pytest

from fleetctl import checks
from fleetctl.checks import Status
from fleetctl.checks.catalog import CHECKS
from tests.executors.sshd import FIXTURES, SshNode

pytestmark = pytest.mark.sshd


@pytest.mark.parametrize(
    ("check", "tool", "fixture", "exit_status", "expected"),
    [
        ("nvidia-smi-query", "nvidia-smi", "nvidia-smi.txt", 0, Status.PASS),
        ("nvidia-smi-query", "nvidia-smi", "nvidia-smi_remap_failure.txt", 0, Status.FAIL),
        ("dcgm-r2", "dcgmi", "dcgmi.txt", 0, Status.PASS),
        ("nccl-allreduce", "all_reduce_perf", "all_reduce_perf.txt", 0, Status.PASS),
        ("nccl-allreduce", "all_reduce_perf", "all_reduce_perf_fabricmanager_down.txt", 1, Status.FAIL),
        ("hpl", "xhpl", "xhpl.txt", 0, Status.PASS),
    ],
)
def test_catalog_check_over_ssh_is_judged(
    ssh_node: SshNode, check: str, tool: str, fixture: str, exit_status: int, expected: Status
) -> None:
    spec = CHECKS[check]
    output = (FIXTURES / fixture).read_text()
    ssh_node.set_tool_output(tool, output, exit_status=exit_status)
    target = ssh_node.target()
    with ssh_node.executor() as executor:
        result = executor.run(target, spec.argv, timeout_s=30)
    assert (result.exit_status, result.stdout, result.truncated) == (exit_status, output, False)
    # The tool got the catalog's argv word for word (HPL runs under the fake mpirun).
    expected_argv = [] if tool == "xhpl" else list(spec.argv[1:])
    assert ssh_node.tool_calls(tool) == [expected_argv]
    assert checks.judge(spec.kind, result.stdout, profile=target.profile).status == expected


def test_output_cut_at_the_cap_is_an_error_never_a_pass(ssh_node: SshNode) -> None:
    spec = CHECKS["nccl-allreduce"]
    with ssh_node.executor(output_cap_bytes=1200) as executor:
        result = executor.run(ssh_node.target(), spec.argv, timeout_s=30)
    assert result.truncated and len(result.stdout) == 1200
    assert checks.judge(spec.kind, result.stdout, profile="h100-sxm").status == Status.ERROR
