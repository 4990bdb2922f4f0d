"""HPL-NVIDIA `xhpl` (read by checks.hpl)."""

from __future__ import annotations

import math
import random

from fleetctl.sim.node import HPL_RUN_SPREAD, NodeState, ToolOutput, healthy_spread
from fleetctl.sim.render._layout import ctime

HPL_NB = 1024
_HPL_BANNER = """\
================================================================================
HPL-NVIDIA 24.09.0  -- NVIDIA accelerated HPL benchmark -- NVIDIA
================================================================================
HPLinpack 2.1  --  High-Performance Linpack benchmark  --   October 26, 2012
Written by A. Petitet and R. Clint Whaley,  Innovative Computing Laboratory, UTK
Modified by Piotr Luszczek, Innovative Computing Laboratory, UTK
Modified by Julien Langou, University of Colorado Denver
================================================================================

An explanation of the input/output parameters follows:
T/V    : Wall time / encoded variant.
N      : The order of the coefficient matrix A.
NB     : The partitioning blocking factor.
P      : The number of process rows.
Q      : The number of process columns.
Time   : Time in seconds to solve the linear system.
Gflops : Rate of execution for solving the linear system.

The following parameter values will be used:
"""
_HPL_RESIDUAL = "||Ax-b||_oo/(eps*(||A||_oo*||x||_oo+||b||_oo)*N)="


def hpl_grid(gpus: int) -> tuple[int, int]:
    """P x Q process grid, as the sample HPL.dat files pick it (P <= Q, as square as possible)."""
    p = int(math.sqrt(gpus))
    while gpus % p:
        p -= 1
    return p, gpus // p


def hpl_problem_size(node: NodeState, gpus: int) -> int:
    """N that fills ~85% of GPU memory, a multiple of NB, as HPL-NVIDIA's sample .dat files do."""
    words = 0.85 * node.profile.memory_mib * 2**20 * gpus / 8
    return int(math.sqrt(words)) // HPL_NB * HPL_NB


def render_hpl(node: NodeState, ranks: int, rng: random.Random) -> tuple[ToolOutput, float]:
    """xhpl output for `ranks` GPUs, and how long the solve itself took."""
    p, q = hpl_grid(ranks)
    n = hpl_problem_size(node, ranks)
    lines = _HPL_BANNER.splitlines()
    params = [
        ("N", f"{n:8d} "),
        ("NB", f"{HPL_NB:8d} "),
        ("PMAP", "Column-major process mapping"),
        ("P", f"{p:8d} "),
        ("Q", f"{q:8d} "),
        ("PFACT", "    Left "),
        ("NBMIN", "       2 "),
        ("NDIV", "       2 "),
        ("RFACT", "    Left "),
        ("BCAST", "  2ringM "),
        ("DEPTH", "       1 "),
        ("SWAP", "Spread-roll (long)"),
        ("L1", "no-transposed form"),
        ("U", "transposed form"),
        ("EQUIL", "no"),
        ("ALIGN", "8 double precision words"),
    ]
    lines += [f"{key.ljust(7)}: {value}" for key, value in params]
    lines += [
        "",
        "-" * 80,
        "",
        "- The matrix A is randomly generated for each test.",
        "- The following scaled residual check will be computed:",
        "      ||Ax-b||_oo / ( eps * ( || x ||_oo * || A ||_oo + || b ||_oo ) * N )",
        "- The relative machine precision (eps) is taken to be               1.110223e-16",
        "- Computational tests pass if scaled residuals are less than                16.0",
        "",
    ]
    lost = [g for g in node.gpus[:ranks] if g.lost]
    if lost:
        rank = lost[0].index
        lines += [
            f"CUDA error at {node.hostname}:{rank}: cudaSetDevice: unknown error (999)",
            "-" * 74,
            "Primary job  terminated normally, but 1 process returned",
            "a non-zero exit code. Per user-direction, the job has been aborted.",
            "-" * 74,
            "-" * 74,
            "mpirun detected that one or more processes exited with non-zero status, thus causing",
            "the job to be terminated. The first process to do so was:",
            "",
            f"  Process name: [[{rng.randint(1000, 65000)},1],{rank}]",
            "  Exit code:    1",
            "-" * 74,
        ]
        return ToolOutput("\n".join(lines) + "\n", exit_status=1), 10.0

    # The slowest GPU paces every panel of a bulk-synchronous solve.
    per_gpu = min(g.hpl_gflops for g in node.gpus[:ranks]) * healthy_spread(rng, HPL_RUN_SPREAD)
    total = per_gpu * ranks
    seconds = (2.0 / 3.0 * n**3 + 2.0 * n**2) / (total * 1e9)
    start = node.now
    for fraction in (0.0173, 0.0345, 0.0458):
        left = int(n * (1 - fraction)) // HPL_NB * HPL_NB
        gf = total * rng.gauss(1.0, 0.01)
        elapsed = seconds * (1 - (1 - fraction) ** 3)  # work left shrinks with the cube of N_left
        lines.append(
            f" Prog= {fraction * 100:.2f}%\tN_left= {left:8d}\tTime= {elapsed:6.2f}\t"
            f"Time_left= {seconds - elapsed:6.2f}\tiGF= {gf:10.2f} GF= {gf:10.2f}  "
            f"iGF_per= {gf / ranks:8.2f}\tGF_per= {gf / ranks:8.2f}"
        )
    residual = rng.uniform(0.0002, 0.0009)
    passed = not node.transient_failure
    if not passed:
        residual = rng.uniform(1e3, 1e6)  # a silent data error during the solve
    lines += [
        "=" * 80,
        "T/V                N    NB     P     Q         Time          Gflops (   per GPU)",
        "-" * 80,
        f"{'WC0':<10}{n:>10d} {HPL_NB:5d} {p:5d} {q:5d} {seconds:12.2f} {total:15.3e} ({per_gpu:10.3e})",
        f"HPL_pdgesv() start time {ctime(start)}",
        f"HPL_pdgesv() end time   {ctime(start + seconds)}",
        "-" * 80,
        f"{_HPL_RESIDUAL} {residual:16.12f} ...... {'PASSED' if passed else 'FAILED'}",
        f"||Ax-b||_oo  . . . . . . . . . . . . . . . . . = {residual * 1.9e-11:.16f}",
        f"||A||_oo . . . . . . . . . . . . . . . . . . . = {n * 0.25 * rng.uniform(0.98, 1.02):.16f}",
        f"||x||_oo . . . . . . . . . . . . . . . . . . . = {rng.uniform(2.0, 15.0):.16f}",
        f"||b||_oo . . . . . . . . . . . . . . . . . . . = {rng.uniform(0.499990, 0.499999):.16f}",
        "=" * 80,
        "",
        "Finished      1 tests with the following results:",
        f"              {int(passed)} tests completed and passed residual checks,",
        f"              {int(not passed)} tests completed and failed residual checks,",
        "              0 tests skipped because of illegal input values.",
        "-" * 80,
        "",
        "End of Tests.",
        "=" * 80,
    ]
    return ToolOutput("\n".join(lines) + "\n", exit_status=0), seconds
