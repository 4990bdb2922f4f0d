"""The fabric checks over a real OpenSSH sshd on 127.0.0.1: every rail (ibstat, then one
shell run of perfquery / ib_write_bw per rail / perfquery) and the all-reduce pairs (mpirun
on each pair's first node), run by the worker's plans through the SSH executor and judged.

The tools on the node are shell scripts that print real outputs (tests/fixtures, cited) and
record their argv; the shell, echo, `&`, `wait` and the redirections are the node's own."""

from __future__ import annotations

import shlex
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from fleetctl.checks import Status, judge, load_profile
from fleetctl.checks.catalog import CHECKS
from fleetctl.checks.nccl import pair_argv
from fleetctl.db import queries
from fleetctl.workflows.activities.check_plans import run_pairs, run_rails
from fleetctl.workflows.api import node_workflow_id
from fleetctl.workflows.client import request_phase
from fleetctl.workflows.definitions.node_lifecycle import NodeLifecycle
from tests.executors.sshd import SshNode
from tests.support.fixtures import FIXTURES
from tests.support.fleet import wait_for

pytestmark = pytest.mark.sshd

IBSTAT = FIXTURES / "ib" / "ibstat_h100_8rails_3eth_down_ok.txt"  # gpud: 8 NDR rails, 4 Ethernet ports
PERFQUERY = FIXTURES / "ib" / "perfquery_x_lid1719_before.out"  # treydock/infiniband_exporter: Lid 1719
BW = FIXTURES / "ib" / "ib_write_bw_ndr_ok.txt"  # the client's table; its Device line says mlx5_0
PAIR = FIXTURES / "nccl" / "2x8xh100_a3mega_verbatim_ok.txt"  # a real two-node run, 338.82 GB/s
RAILS = ["mlx5_0", "mlx5_10", "mlx5_11", "mlx5_3", "mlx5_4", "mlx5_5", "mlx5_6", "mlx5_9"]


def _record(node: SshNode) -> str:
    calls = shlex.quote(str(node.root / "state" / "calls"))
    return f'tool=$(basename "$0")\nprintf \'%s\\0\' "$tool" "$@" > {calls}/"$tool.$$"\n'


@contextmanager
def tools(node: SshNode, flapping: str | None = None) -> Iterator[None]:
    """ibstat, perfquery, ib_write_bw, mpirun and a no-op sleep on the node, for the test.
    perfquery prints port 1 of the real block; on the `flapping` device its second read has
    LinkDownedCounter one higher (the link went down during the run)."""
    port_1 = PERFQUERY.read_text().split("# Port extended counters: Lid 1719 port 2")[0]
    (node.root / "perfquery.txt").write_text("".join(port_1.splitlines(keepends=True)[1:]))  # less its source line
    state = shlex.quote(str(node.root / "state"))
    scripts = {
        "ibstat": f"cat {shlex.quote(str(IBSTAT))}\n",
        # -x -C DEVICE -P PORT: the device is $3
        "perfquery": f"""seen={state}/perfquery.$3
if [ -e "$seen" ] && [ "$3" = {shlex.quote(flapping or "-")} ]; then
  sed 's/^LinkDownedCounter:\\(\\.*\\)0$/LinkDownedCounter:\\11/' {shlex.quote(str(node.root / "perfquery.txt"))}
else
  cat {shlex.quote(str(node.root / "perfquery.txt"))}
fi
touch "$seen"
""",
        # -d DEVICE ...: the server (no peer named) prints nothing here; the client its table
        "ib_write_bw": f"""for last; do :; done
[ "$last" = localhost ] && sed "s/mlx5_0/$2/" {shlex.quote(str(BW))}
exit 0
""",
        "mpirun": f"cat {shlex.quote(str(PAIR))}\n",
        "sleep": "exit 0\n",  # the script's 1 s wait for each server, not needed by these fakes
    }
    saved = {name: (node.bin_dir / name).read_text() for name in scripts if (node.bin_dir / name).exists()}
    for name, body in scripts.items():
        (node.bin_dir / name).write_text("#!/bin/sh\n" + _record(node) + body)
        (node.bin_dir / name).chmod(0o755)
    try:
        yield
    finally:
        for name in scripts:
            if name in saved:
                (node.bin_dir / name).write_text(saved[name])
            else:
                (node.bin_dir / name).unlink()
        for seen in (node.root / "state").glob("perfquery.*"):
            seen.unlink()


def test_every_rail_over_ssh(ssh_node: SshNode) -> None:
    spec = CHECKS["ib-rails"]
    with tools(ssh_node), ssh_node.executor() as executor:
        result = run_rails(
            lambda argv: executor.run(ssh_node.target(), argv, timeout_s=60), spec, load_profile("h100-sxm")
        )
    verdict = judge(spec.kind, result.stdout, "h100-sxm")
    assert verdict.status is Status.PASS, verdict.reason
    assert sorted(verdict.metrics["bw_avg_gbps"]) == sorted(f"{d} port 1" for d in RAILS)
    # Each rail: the server and the client, on that device and port; counters before and after.
    bw_calls = ssh_node.tool_calls("ib_write_bw")
    assert sorted(c[1] for c in bw_calls) == sorted(RAILS * 2)
    assert all(c[:4] == ["-d", c[1], "-i", "1"] and "--report_gbits" in c for c in bw_calls)
    assert sorted(c for c in ssh_node.tool_calls("perfquery")) == sorted(
        [["-x", "-C", d, "-P", "1"] for d in RAILS] * 2
    )


def test_a_rail_that_flapped_during_the_run_fails_over_ssh(ssh_node: SshNode) -> None:
    spec = CHECKS["ib-rails"]
    with tools(ssh_node, flapping="mlx5_6"), ssh_node.executor() as executor:
        result = run_rails(
            lambda argv: executor.run(ssh_node.target(), argv, timeout_s=60), spec, load_profile("h100-sxm")
        )
    verdict = judge(spec.kind, result.stdout, "h100-sxm")
    assert verdict.status is Status.FAIL
    assert verdict.reason == "mlx5_6 port 1: LinkDownedCounter rose by 1 during the check (0 -> 1)"


def test_pairs_over_ssh_launch_mpirun_on_each_pairs_first_node(ssh_node: SshNode) -> None:
    spec = CHECKS["nccl-pairs"]
    with tools(ssh_node), ssh_node.executor() as executor:
        result = run_pairs(
            lambda name, argv: executor.run(ssh_node.target(name), argv, timeout_s=60),
            spec,
            "gpu-x",
            ["gpu-p", "gpu-q"],
            8,
        )
    calls = ssh_node.tool_calls("mpirun")
    assert sorted(calls) == sorted(
        list(pair_argv(a, b, 8, spec.argv)[1:]) for a, b in [("gpu-x", "gpu-p"), ("gpu-x", "gpu-q"), ("gpu-p", "gpu-q")]
    )
    verdict = judge(spec.kind, result.stdout, "a100-sxm-80gb")  # 338.82 GB/s: over A100's floor
    assert verdict.status is Status.PASS and verdict.metrics["partners"] == ["gpu-p", "gpu-q"], verdict.reason
    # Under H100's warn floor (368 GB/s), over its fail floor: a warning, named by pair.
    assert judge(spec.kind, result.stdout, "h100-sxm").status is Status.WARN


@pytest.mark.temporal
async def test_the_worker_runs_both_in_a_suite_over_ssh(ssh_fleet, ssh_node: SshNode) -> None:
    """Through the real worker: the suite's checks run their plans over SSH, the pairs with
    the fleet's other nodes (new, idle) as partners, and each is recorded judged."""
    fleet = await ssh_fleet(3)
    name, *partners = fleet.names
    Path(fleet.settings.suites_dir, "fabric.yaml").write_text("name: fabric\nchecks: [ib-rails, nccl-pairs]\n")
    await fleet.to_production(name)
    with tools(ssh_node):
        _, accepted, message = await request_phase(fleet.client, name, "recheck", "tester", "fabric")
        assert accepted, message

        async def done() -> bool:
            s = await fleet.client.get_workflow_handle(node_workflow_id(name)).query(NodeLifecycle.current)
            return not s.work and not s.activity and len(queries.latest_checks(fleet.engine, name)) == 2

        await wait_for(done, 120, "the fabric recheck")
    runs = {r.check_name: r for r in queries.latest_checks(fleet.engine, name)}
    assert runs["ib-rails"].status == "pass", runs["ib-rails"].reason
    # 338.82 GB/s with each partner: under H100's warn floor, a warning, not a failure
    assert runs["nccl-pairs"].status == "warn", runs["nccl-pairs"].reason
    assert sorted(runs["nccl-pairs"].metrics["partners"]) == sorted(partners)
    assert "### fleetctl step: pair" in runs["nccl-pairs"].raw_output
    assert queries.get_node(fleet.engine, name).state == "production"
