"""nccl-tests `all_reduce_perf` (read by checks.nccl)."""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass

from fleetctl.sim.node import NodeState, ToolOutput


@dataclass(frozen=True)
class AllReduceRun:
    """What all_reduce_perf was asked for (its -b/-e/-f/-i/-g/-t/-n/-w/-c flags)."""

    min_bytes: int
    max_bytes: int
    step_factor: int  # multiplies the size when > 1; otherwise step_bytes is added
    step_bytes: int
    gpus: int
    threads: int
    iters: int
    warmup_iters: int
    check: int

    def sizes(self) -> list[int]:
        sizes, size = [], self.min_bytes
        while size <= self.max_bytes:
            sizes.append(size)
            size = size * self.step_factor if self.step_factor > 1 else size + self.step_bytes
        return sizes


def _nccl_time(usec: float) -> str:
    """nccl-tests prints more digits for faster runs."""
    if usec >= 10000.0:
        return f"{usec:7.0f}"
    if usec >= 100.0:
        return f"{usec:7.1f}"
    return f"{usec:7.2f}"


def render_all_reduce_perf(
    node: NodeState,
    run: AllReduceRun,
    rng: random.Random,
    peers: Sequence[NodeState] = (),
    ranks_per_node: int | None = None,
) -> tuple[ToolOutput, float]:
    """all_reduce_perf output, and the seconds the sweep itself took. With `peers` (the other
    hosts an MPI launcher started ranks on, `ranks_per_node` GPUs each) it is a multi-node
    run: rank 0 on `node` prints it, and the slowest node's fabric (or leaf uplinks, for a run
    across leaves) sets the bandwidth."""
    if peers:
        return _render_multinode(node, list(peers), ranks_per_node or 1, run, rng)
    ranks = run.gpus * run.threads
    lines = [
        f"# nThread {run.threads} nGpus {run.gpus} minBytes {run.min_bytes} maxBytes {run.max_bytes} "
        + (f"step: {run.step_factor}(factor)" if run.step_factor > 1 else f"step: {run.step_bytes}(bytes)")
        + f" warmup iters: {run.warmup_iters} iters: {run.iters} agg iters: 1 validation: {run.check} graph: 0",
        "#",
        "# Using devices",
    ]
    pid = rng.randint(1000, 4_000_000)
    if ranks > len(node.gpus):
        # More GPUs than the node has: CUDA refuses the device ordinal past the last, as
        # NVIDIA/nccl-tests#165 and #263 show it (`-g 8` on fewer GPUs).
        lines.append(f"{node.hostname}: Test CUDA failure common.cu:1002 'invalid device ordinal'")
        lines.append(f" .. {node.hostname} pid {pid}: Test failure common.cu:891")
        return ToolOutput("\n".join(lines) + "\n", exit_status=2), 2.0
    for rank in range(ranks):
        gpu = node.gpus[rank]
        lines.append(
            f"#  Rank {rank:2d} Group  0 Pid {pid:6d} on {node.hostname:>10s} device {rank:2d} "
            f"[0x{gpu.bus:02x}] {node.profile.gpu_name}"
        )
    lost = [g for g in node.gpus[:ranks] if g.lost]
    if lost:
        # CUDA cannot open a GPU that fell off the bus: the test dies before the first size.
        lines.append(f"{node.hostname}: Test CUDA failure common.cu:1070 'unknown error'")
        lines.append(f" .. {node.hostname} pid {pid}: Test failure common.cu:891")
        return ToolOutput("\n".join(lines) + "\n", exit_status=3), 5.0
    return _sweep(
        lines, node.allreduce_busbw_gbps, ranks, node.profile.allreduce_latency_us, node.transient_failure, run, rng
    )


def _render_multinode(
    node: NodeState, peers: list[NodeState], per_node: int, run: AllReduceRun, rng: random.Random
) -> tuple[ToolOutput, float]:
    hosts = [node, *peers]
    lines = [
        f"# nThread {run.threads} nGpus {run.gpus} minBytes {run.min_bytes} maxBytes {run.max_bytes} "
        + (f"step: {run.step_factor}(factor)" if run.step_factor > 1 else f"step: {run.step_bytes}(bytes)")
        + f" warmup iters: {run.warmup_iters} iters: {run.iters} agg iters: 1 validation: {run.check} graph: 0",
        "#",
        "# Using devices",
    ]
    rank = 0
    for host in hosts:
        pid = rng.randint(1000, 4_000_000)
        for local in range(per_node):
            if local >= len(host.gpus):  # a rank past the host's GPUs (one never initialised, say)
                lines.append(f"{host.hostname}: Test CUDA failure common.cu:1002 'invalid device ordinal'")
                lines.append(f" .. {host.hostname} pid {pid + local}: Test failure common.cu:891")
                return ToolOutput("\n".join(lines) + "\n", exit_status=2), 2.0
            gpu = host.gpus[local]
            lines.append(
                f"#  Rank {rank:2d} Group  0 Pid {pid + local:6d} on {host.hostname:>10s} device {local:2d} "
                f"[0x{gpu.bus:02x}] {host.profile.gpu_name}"
            )
            rank += 1
    for host in hosts:
        if any(g.lost for g in host.gpus[:per_node]) or len(host.gpus) < per_node:
            lines.append(f"{host.hostname}: Test CUDA failure common.cu:1070 'unknown error'")
            lines.append(f" .. {host.hostname} pid {pid}: Test failure common.cu:891")
            return ToolOutput("\n".join(lines) + "\n", exit_status=3), 5.0
    busbw = min(h.fabric_busbw_gbps for h in hosts) * _uplink_factor(hosts)
    if busbw <= 0:
        lines.append(
            f"{node.hostname}: Test NCCL failure common.cu:1279 'unhandled system error (run with NCCL_DEBUG=INFO for details)'"
        )
        lines.append(f" .. {node.hostname} pid {pid}: Test failure common.cu:1151")
        return ToolOutput("\n".join(lines) + "\n", exit_status=3), 30.0
    # Inter-node latency: a few microseconds more than NVLink per ring step.
    return _sweep(
        lines, busbw, rank, node.profile.allreduce_latency_us * 2, any(h.transient_failure for h in hosts), run, rng
    )


def _uplink_factor(hosts: Sequence[NodeState]) -> float:
    """What the leaves' uplinks let through: a run whose hosts are all on one leaf never
    leaves it; one across leaves moves its ring through each leaf's uplinks, at the pace of
    the slowest. A host on no known leaf counts as elsewhere."""
    if len({h.leaf for h in hosts}) < 2:
        return 1.0
    return min(h.leaf_uplink_factor for h in hosts)


def _sweep(
    lines: list[str],
    busbw_gbps: float,
    ranks: int,
    latency_us: float,
    transient: bool,
    run: AllReduceRun,
    rng: random.Random,
) -> tuple[ToolOutput, float]:
    lines += [
        "#",
        "#                                                              out-of-place                       in-place",
        "#       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw   busbw #wrong",
        "#        (B)    (elements)                               (us)  (GB/s)  (GB/s)            (us)  (GB/s)  (GB/s)",
    ]
    bus_factor = 2 * (ranks - 1) / ranks if ranks > 1 else 1.0
    peak_algbw = busbw_gbps / bus_factor  # GB/s = bytes per ns
    sizes = run.sizes()
    # A flaky node corrupts data in the upper half of the sweep.
    corrupt_from = len(sizes) // 2 if transient else len(sizes)
    busbw_sum, wrong_total, elapsed_us = 0.0, 0, 0.0
    for position, size in enumerate(sizes):
        count = size // 4  # float
        cells = []
        for _ in ("out-of-place", "in-place"):
            usec = (latency_us + size / (peak_algbw * 1e3)) * rng.gauss(1.0, 0.004)
            algbw = size / usec / 1e3
            busbw = algbw * bus_factor
            wrong = max(1, count // 7) if position >= corrupt_from else 0
            busbw_sum += busbw
            wrong_total += wrong
            elapsed_us += usec * (run.iters + run.warmup_iters)
            cells.append(f"  {_nccl_time(usec)}  {algbw:6.2f}  {busbw:6.2f}  {wrong:5d}")
        lines.append(f"{size:12d}  {count:12d}  {'float':>8s}  {'sum':>6s}  {-1:6d}" + "".join(cells))
    lines += [
        f"# Out of bounds values : {wrong_total} {'FAILED' if wrong_total else 'OK'}",
        f"# Avg bus bandwidth    : {busbw_sum / (2 * len(sizes)):g}" if sizes else "# Avg bus bandwidth    : 0",
        "#",
    ]
    return ToolOutput("\n".join(lines) + "\n", exit_status=1 if wrong_total else 0), elapsed_us / 1e6
