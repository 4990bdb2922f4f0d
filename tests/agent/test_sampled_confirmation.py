"""One sample that misses a GPU drains nothing; a GPU missing from every sample drains the
node. The real `fleetctl agent` process samples a stand-in nvidia-smi (a script that answers
with real nvidia-smi outputs, tests/fixtures/checks/nvidia_smi, in the order a plan gives),
with a real Temporal server and worker; the node's database row and recorded events are
what is checked."""

from __future__ import annotations

import shutil
import stat
from pathlib import Path

import pytest

from fleetctl.agent.runner import SAMPLE_TIMEOUT_S
from fleetctl.db import queries
from fleetctl.workflows.client import connect
from tests.agent.test_agent_faults import DELIVERY_S, AgentProcess, agents, drained, fleet  # noqa: F401 - fixtures
from tests.conftest import FIXTURES
from tests.support.fleet import wait_for
from tests.support.worker import start_in_production

pytestmark = [pytest.mark.temporal, pytest.mark.slow]

NVSMI = FIXTURES / "checks" / "nvidia_smi"
SAMPLE_EVERY_S = 1  # the agent's --sample-interval here (its least)
# One sample: the stand-in answering within the agent's timeout, then the interval.
SAMPLE_S = SAMPLE_TIMEOUT_S + SAMPLE_EVERY_S
# The stand-in: the Nth call answers with the output the plan's Nth line names (the last line
# once the plan is done), or with the one named in `always` once that file is there.
STAND_IN = """#!/bin/sh
dir={dir}
n=$(( $(cat "$dir/count" 2>/dev/null || echo 0) + 1 ))
echo "$n" > "$dir/count"
if [ -f "$dir/always" ]; then exec cat "$dir/$(cat "$dir/always")"; fi
name=$(sed -n "${{n}}p" "$dir/plan")
[ -n "$name" ] || name=$(tail -n 1 "$dir/plan")
exec cat "$dir/$name"
"""


def stand_in_nvidia_smi(tmp_path: Path, plan: list[str]) -> Path:
    folder = tmp_path / "nvidia-smi"
    folder.mkdir()
    shutil.copy(NVSMI / "csv_8xh100_ok.txt", folder / "whole")
    shutil.copy(NVSMI / "csv_7xh100_missing_gpu_fail.txt", folder / "missing")
    (folder / "plan").write_text("\n".join(plan) + "\n")
    script = folder / "nvidia-smi"
    script.write_text(STAND_IN.format(dir=folder))
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    return folder


async def test_a_gpu_missing_from_one_sample_drains_nothing_and_missing_from_every_sample_drains(
    fleet,
    agents,
    tmp_path,
) -> None:
    settings, engine, node = fleet
    await start_in_production(await connect(settings), settings, node)
    (tmp_path / "kmsg").write_text("")
    # Whole, then 7 of 8 GPUs once (a driver racing a reset), then whole again.
    smi = stand_in_nvidia_smi(tmp_path, ["whole", "missing", "whole"])
    agent = AgentProcess(
        tmp_path,
        settings.temporal_address,
        node,
        "--sample-interval",
        str(SAMPLE_EVERY_S),
        "--nvidia-smi",
        str(smi / "nvidia-smi"),
        "--profile",
        "h100-sxm",
    )
    agents.append(agent)
    await agent.started()
    # The miss, its re-sample (whole) and two more whole samples judged.
    await wait_for(lambda: agent.metric("fleetctl_agent_samples_total") >= 5, 5 * SAMPLE_S, "five samples")
    assert int((smi / "count").read_text()) >= 5
    assert agent.metric("fleetctl_agent_events_detected_total") == 0
    assert agent.metric("fleetctl_agent_spool_depth") == 0
    assert queries.health_events(engine, node, limit=10) == []
    assert queries.get_node(engine, node).state == "production"

    # From now on every sample misses the GPU: the first and its re-sample agree.
    (smi / "always").write_text("missing")
    await wait_for(drained(engine, node, agent), 2 * SAMPLE_S + DELIVERY_S, "the node drained")
    (event,) = queries.health_events(engine, node, limit=10)
    assert event.severity == "critical" and "7 GPUs visible, h100-sxm has 8" in event.message
    assert agent.metric("fleetctl_agent_events_detected_total") == 1
