"""The host-nvme check's shell script over SSH on the fake node: one `nvme smart-log` per
controller under its transcript step, each answer judged (checks/storage.py). The fake `nvme`
prints what the test sets for every device: a real drive's JSON (tests/fixtures/checks/storage),
or the open error of a controller the node lacks."""

from __future__ import annotations

import pytest

from fleetctl import checks
from fleetctl.checks import Status
from fleetctl.checks.catalog import CHECKS
from fleetctl.checks.storage import MAX_NVME
from tests.executors.sshd import SshNode
from tests.support.fixtures import fixture_text

pytestmark = pytest.mark.sshd

DRIVE = fixture_text("storage/nvme_smart_log_json_ok.txt").split("\n", 1)[1]


@pytest.mark.parametrize(
    ("output", "exit_status", "status", "reason"),
    [
        (DRIVE, 0, Status.PASS, f"{MAX_NVME} NVMe drives healthy"),
        (DRIVE.replace('"critical_warning" : 0', '"critical_warning" : 8'), 0, Status.FAIL, "read-only"),
        ("/dev/nvme0: No such file or directory\n", 1, Status.ERROR, "no NVMe controller answered"),
    ],
)
def test_every_controller_is_asked_and_judged(
    ssh_node: SshNode, output: str, exit_status: int, status: Status, reason: str
) -> None:
    spec = CHECKS["host-nvme"]
    ssh_node.set_tool_output("nvme", output, exit_status=exit_status)
    target = ssh_node.target()
    with ssh_node.executor() as executor:
        result = executor.run(target, spec.argv, timeout_s=60)
    # A controller that is absent fails its own command only: the script goes on and ends well.
    assert result.exit_status == 0, result.stderr
    # Each controller once (the fake records calls by mtime: calls a few microseconds apart may tie).
    calls = sorted(ssh_node.tool_calls("nvme"), key=lambda argv: int(argv[1].removeprefix("/dev/nvme")))
    assert calls == [["smart-log", f"/dev/nvme{i}", "-o", "json"] for i in range(MAX_NVME)]
    judged = checks.judge(spec.kind, result.stdout)
    assert judged.status is status and reason in judged.reason, judged
