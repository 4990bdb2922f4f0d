"""nccl-tests `*_perf` output (all_reduce_perf and the other collectives: one table format).

Handles the pre-2.18 and 2.18+ headers, `#wrong` printed as an integer, `%g` or `N/A`, the
older `error` column, launcher line prefixes, interleaved NCCL INFO lines, the
`Out of bounds values` verdict, runs that died (`Test NCCL failure`, `Test CUDA failure`)
and runs that hung (no footer).
"""

from __future__ import annotations

import itertools
import re
from dataclasses import dataclass, field
from typing import Any

from fleetctl.checks._text import UnjudgeableOutput, integer, lines_of, number, verdict
from fleetctl.checks.profiles import GpuProfile, NcclCollective
from fleetctl.checks.result import CheckResult, Finding, Status

# Bus bandwidth only approaches the link limit at large messages; below this the absolute
# floor in a profile means nothing (NVIDIA's nccl-tests PERFORMANCE.md reports at >= 1 GiB).
MIN_SIZE_FOR_BANDWIDTH_BYTES = 1 << 30

_DEVICE = re.compile(
    r"#\s+Rank\s+(?P<rank>\d+)\s+(?:Group\s+\d+\s+)?Pid\s+\d+\s+on\s+(?P<host>\S+)\s+device\s+(?P<dev>\d+)"
)
_OUT_OF_BOUNDS = re.compile(r"#\s*Out of bounds values\s*:\s*(?P<count>\S+)\s+(?P<verdict>OK|FAILED)\b")
_AVG_BUSBW = re.compile(r"#\s*Avg bus bandwidth\s*:\s*(?P<value>\S+)")
_FOOTER = re.compile(r"#\s*(?:Out of bounds values|Avg bus bandwidth)\b")
_COLLECTIVE = re.compile(r"#\s*Collective test starting:\s*(?P<name>\S+)")
_DIED = re.compile(r"Test (?:NCCL|CUDA) failure|Test failure common")
_NOISE = re.compile(r"\bNCCL (?:INFO|WARN)\b|^NCCL version")
# NCCL_DEBUG=INFO's communicator line, the rank count of a run whose device list is not there:
# "NCCL INFO comm 0x7f57... rank 15 nranks 32 cudaDev 7 nvmlDev 7 - Init COMPLETE".
_NRANKS = re.compile(r"\bNCCL INFO (?:\w+ )?comm \S+ rank \d+ nranks (?P<nranks>\d+)\b")
# Bytes per element of each data type nccl-tests prints, to read a row's rank multiple.
_TYPE_BYTES = {
    "int8": 1,
    "uint8": 1,
    "fp8_e4m3": 1,
    "fp8_e5m2": 1,
    "half": 2,
    "bfloat16": 2,
    "int32": 4,
    "uint32": 4,
    "int": 4,
    "uint": 4,
    "float": 4,
    "int64": 8,
    "uint64": 8,
    "double": 8,
}
_DTYPES = frozenset(
    [
        "int8",
        "uint8",
        "int32",
        "uint32",
        "int64",
        "uint64",
        "half",
        "float",
        "double",
        "bfloat16",
        "fp8_e4m3",
        "fp8_e5m2",
        "int",
        "uint",
    ]
)


@dataclass
class NcclRow:
    size_bytes: int
    count: int
    dtype: str
    redop: str | None  # "sum", "none" (a collective that reduces nothing)...; None in a layout without it
    out_of_place: dict[str, float | None]  # time_us, algbw_gbps, busbw_gbps, wrong
    in_place: dict[str, float | None]


@dataclass
class NcclPerfResult:
    collective: str | None = None
    columns: list[str] = field(default_factory=list)
    rows: list[NcclRow] = field(default_factory=list)
    hosts: set[str] = field(default_factory=set)
    ranks: int = 0  # "# Rank" lines: one per rank, each naming its host
    nranks: int = 0  # the communicator's size NCCL_DEBUG=INFO states, where the output has it
    out_of_bounds: int | None = None
    out_of_bounds_failed: bool | None = None
    avg_busbw_gbps: float | None = None
    died: list[str] = field(default_factory=list)
    cut_line: str | None = None  # the last line, when the output ends inside it

    @property
    def validates_with_error_column(self) -> bool:
        """Before nccl-tests 2.0 the last column was the max error, not a count of wrong values."""
        return "error" in self.columns

    @property
    def wrong(self) -> int | None:
        if self.validates_with_error_column:
            return self.out_of_bounds
        counts = [
            half["wrong"] for row in self.rows for half in (row.out_of_place, row.in_place) if half["wrong"] is not None
        ]
        return int(sum(counts)) if counts else None


_HALF_NAMES = {"time": "time_us", "algbw": "algbw_gbps", "busbw": "busbw_gbps", "#wrong": "wrong", "error": "wrong"}


def parse_nccl(text: str) -> NcclPerfResult:
    result = NcclPerfResult()
    lines = lines_of(text)
    if lines and not text.endswith(("\n", "\r")):
        # nccl-tests ends every line it prints with a newline: a last line without one was
        # cut (a cap, a killed job, a lost tail). Its footer value may have lost digits
        # ("70.742" read as "70.7"), so it is no evidence; a cut row is still read, and
        # fails to parse, so it keeps the run unjudgeable.
        result.cut_line = lines[-1].strip()
    for at, line in enumerate(lines):
        stripped = line.strip()
        if result.cut_line is not None and at == len(lines) - 1 and _FOOTER.match(stripped):
            continue
        if _DIED.search(line):
            result.died.append(stripped)
        elif m := _NRANKS.search(stripped):
            result.nranks = max(result.nranks, int(m["nranks"]))
        elif _NOISE.search(stripped) or not stripped:
            continue
        elif stripped.startswith("#") and not (result.columns and _looks_like_row(stripped[1:], 0)):
            _read_comment(stripped, result)
        elif result.columns and _looks_like_row(stripped, len(result.columns)):
            result.rows.append(_read_row(stripped, result.columns))
    return result


def _read_comment(line: str, result: NcclPerfResult) -> None:
    tokens = line.lstrip("#").split()
    if tokens[:2] == ["size", "count"] and "busbw" in tokens:
        result.columns = tokens
    elif m := _DEVICE.match(line):
        result.hosts.add(m["host"])
        result.ranks += 1
    elif m := _OUT_OF_BOUNDS.match(line):
        result.out_of_bounds = integer(m["count"])
        result.out_of_bounds_failed = m["verdict"] == "FAILED"
    elif m := _AVG_BUSBW.match(line):
        result.avg_busbw_gbps = number(m["value"])
    elif m := _COLLECTIVE.match(line):
        result.collective = m["name"]


def _looks_like_row(line: str, n_columns: int) -> bool:
    # A data type among the first cells marks a row even when a garbled prefix shifts it
    # or a garbled size turns it into a "comment".
    tokens = line.split()
    return len(tokens) == n_columns or any(t in _DTYPES for t in tokens[:4])


def _read_row(line: str, columns: list[str]) -> NcclRow:
    tokens = line.split()
    if len(tokens) != len(columns):
        raise UnjudgeableOutput(f"result row has {len(tokens)} fields, the header {len(columns)}: {line[:80]!r}")
    time_at = columns.index("time")
    if "root" in columns:
        integer(tokens[columns.index("root")])  # -1 for all-reduce; read only to reject garbage
    halves: list[dict[str, float | None]] = [{}, {}]
    half = -1
    for name, cell in zip(columns[time_at:], tokens[time_at:], strict=False):
        if name == "time":
            half += 1
        key = _HALF_NAMES.get(name)
        if key is None or half > 1:
            raise UnjudgeableOutput(f"unknown nccl-tests column {name!r}")
        # Validation off (-c 0) prints N/A in #wrong; timings are always numbers.
        halves[half][key] = number(cell, allow_missing=key == "wrong")
    if half != 1:
        raise UnjudgeableOutput("nccl-tests header lacks the in-place columns")
    redop = tokens[columns.index("redop")] if "redop" in columns else None
    return NcclRow(integer(tokens[0]), integer(tokens[1]), tokens[2], redop, halves[0], halves[1])


def judge_nccl(text: str, profile: GpuProfile | None) -> CheckResult:
    run = parse_nccl(text)
    metrics = _metrics(run)
    findings: list[Finding] = []
    if run.died:
        findings.append(Finding(f"test died: {run.died[0]}"))
    if run.wrong or run.out_of_bounds_failed:
        count = run.wrong if run.wrong else run.out_of_bounds
        findings.append(Finding(f"{count:g} wrong values: data corrupted in transfer"))
    if findings:
        return verdict(findings, metrics, "")
    if not run.columns:
        raise UnjudgeableOutput("no nccl-tests result table in the output")
    if not run.rows:
        raise UnjudgeableOutput("nccl-tests printed its header but no result rows")
    if run.out_of_bounds is None or run.avg_busbw_gbps is None:
        last = run.rows[-1].size_bytes
        if run.cut_line is not None and _FOOTER.match(run.cut_line):
            raise UnjudgeableOutput(f"the output ends inside its footer ({run.cut_line[:60]!r}): cut short")
        raise UnjudgeableOutput(f"no nccl-tests footer after the {last} B row: the run hung or the output was cut")

    largest = run.rows[-1]
    reason = f"busbw {metrics['busbw_gbps']:g} GB/s at {largest.size_bytes} B, no wrong values"
    if profile is not None:
        if largest.size_bytes < MIN_SIZE_FOR_BANDWIDTH_BYTES:
            reason += "; largest size under 1 GiB, bandwidth floor not applied"
        else:
            found, note = _judge_bandwidth(run, metrics, profile)
            findings += found
            reason += f"; {note}"
    return verdict(findings, metrics, reason)


def collective_of(run: NcclPerfResult) -> str | None:
    """Which collective ran: named by the header (nccl-tests 2.18+), else read from the largest
    row (nccl-tests' getCollByteCount and getBw per collective). A row's size over its count's
    bytes is 1, or the rank count where the count is per rank (all_gather, reduce_scatter,
    alltoall); busbw over algbw is 2(n-1)/n for all_reduce, (n-1)/n for those three, 1 for
    sendrecv, broadcast and reduce. all_gather and alltoall print alike, as do the last three
    (and all_reduce on 2 ranks): None, never a guess."""
    if run.collective:
        return run.collective.removesuffix("_perf")
    row = run.rows[-1]
    width = _TYPE_BYTES.get(row.dtype)
    algbw, busbw = row.out_of_place["algbw_gbps"], row.out_of_place["busbw_gbps"]
    if not width or not row.count or not algbw or not busbw or algbw < 1:  # too few digits to read a ratio
        return None
    multiple, factor = round(row.size_bytes / (row.count * width)), busbw / algbw
    if multiple > 1:
        fits = _near(factor, (multiple - 1) / multiple)
        return "reduce_scatter" if fits and row.redop not in (None, "none") else None
    return "all_reduce" if factor > 1.05 else None  # of these only all_reduce's 2(n-1)/n exceeds 1 (n > 2)


def _near(value: float, expected: float) -> bool:
    return abs(value - expected) <= 0.03 * expected + 0.005  # busbw and algbw print with 2 decimals


def _judge_bandwidth(run: NcclPerfResult, metrics: dict[str, Any], profile: GpuProfile) -> tuple[list[Finding], str]:
    """The run's busbw at its largest size against the profile's floor for its collective and
    its span: one node, or several (told by its hosts, or by a rank count past one node's GPUs
    where the output lists no hosts)."""
    collective = metrics["collective"]
    if collective is None:
        what = "the collective is not named and its rows do not say which: bandwidth floor not applied"
        return [Finding(what, None, "info")], what
    ranks = max(run.ranks, run.nranks)
    if not ranks:
        raise UnjudgeableOutput(
            "the output lists no ranks (no '# Rank' lines, no NCCL nranks): one node cannot be told from "
            "several, so no bandwidth floor applies"
        )
    nodes = len(run.hosts) if len(run.hosts) > 1 else -(-ranks // profile.gpu_count)
    metrics["nodes"] = nodes
    if nodes > 1:
        if collective != "all_reduce":
            what = f"{nodes}-node {collective}: the multi-node floor of {profile.name} is all-reduce's, not applied"
            return [Finding(what, None, "info")], what
        return _judge_multinode(run, ranks, nodes, metrics, profile), (
            f"{nodes}-node run, held to the multi-node floor of {profile.name}"
        )
    floor = (
        profile.nccl_allreduce_busbw_gbps
        if collective == "all_reduce"
        else profile.nccl_collective_busbw_gbps.get(NcclCollective(collective))
        if collective in {c.value for c in NcclCollective}
        else None
    )
    if floor is None:
        what = f"{profile.name} has no {collective} floor: bandwidth not judged"
        return [Finding(what, None, "info")], what
    finding = floor.judge(metrics["busbw_gbps"], f"{collective} out-of-place busbw at the largest size", "GB/s")
    return ([finding] if finding else []), f"{collective} floor of {profile.name}: {floor.fail:g} GB/s"


def _judge_multinode(
    run: NcclPerfResult, ranks: int, nodes: int, metrics: dict[str, Any], profile: GpuProfile
) -> list[Finding]:
    """An all-reduce over several nodes against the profile's multi-node floor (measured on 2).

    How the floor scales with the node count: nccl-tests' doc/PERFORMANCE.md defines all-reduce
    busbw = algbw * 2(n-1)/n over n ranks, the correction that makes busbw "independent of the
    number of ranks" and comparable with the bottleneck's bandwidth (here every node's rails).
    So the floor on busbw is the same at 2 nodes or 32; what the node count changes is the
    algbw that floor means, busbw * n / (2(n-1)), reported beside it.

    The floor is for every GPU of each node (one rank per GPU, so every rail carries traffic):
    a run with another number of ranks per node cannot be held to it."""
    if ranks != nodes * profile.gpu_count:
        return [
            Finding(
                f"{ranks} ranks on {nodes} nodes, not {profile.gpu_count} per node: the multi-node "
                f"floor of {profile.name} is for all of each node's GPUs, not applied",
                None,
                "info",
            )
        ]
    floor = profile.nccl_multinode_busbw_gbps
    metrics["multinode_floor_busbw_gbps"] = floor.fail
    metrics["multinode_floor_algbw_gbps"] = round(floor.fail * ranks / (2 * (ranks - 1)), 2)
    finding = floor.judge(metrics["busbw_gbps"], f"{nodes}-node out-of-place busbw at the largest size", "GB/s")
    return [finding] if finding else []


def _metrics(run: NcclPerfResult) -> dict[str, Any]:
    largest = max(run.rows, key=lambda r: r.size_bytes) if run.rows else None
    return {
        # all_reduce, all_gather...: named by the header or read from the rows; None if neither says
        "collective": collective_of(run) if run.rows or run.collective else None,
        "busbw_gbps": largest.out_of_place["busbw_gbps"] if largest else None,
        "algbw_gbps": largest.out_of_place["algbw_gbps"] if largest else None,
        "in_place_busbw_gbps": largest.in_place["busbw_gbps"] if largest else None,
        "largest_size_bytes": largest.size_bytes if largest else None,
        "avg_busbw_gbps": run.avg_busbw_gbps,
        "wrong": run.wrong,
        "rows": len(run.rows),
        "ranks": run.ranks,
        "hosts": len(run.hosts),
    }


# ---- multi-node: all-reduce over pairs of nodes -----------------------------------------


def pair_argv(a: str, b: str, gpus_per_node: int, program: tuple[str, ...]) -> tuple[str, ...]:
    """Two nodes' all-reduce, launched on `a` by MPI: one rank per GPU (`program` is the
    catalog's all_reduce_perf argv, run with -g 1 per rank)."""
    return hosts_argv((a, b), gpus_per_node, program)


def hosts_argv(hosts: tuple[str, ...], gpus_per_node: int, program: tuple[str, ...]) -> tuple[str, ...]:
    """An all-reduce across `hosts`, launched on the first by MPI, one rank per GPU of each."""
    if gpus_per_node < 1:
        raise ValueError(f"gpus per node must be 1 or more, not {gpus_per_node}")
    return (
        "mpirun",
        "--host",
        ",".join(f"{h}:{gpus_per_node}" for h in hosts),
        "-np",
        str(len(hosts) * gpus_per_node),
        "--npernode",
        str(gpus_per_node),
        *program,
    )


def pair_plan(node: str, partners: list[str]) -> list[tuple[str, str, str]]:
    """The pairs to run, as (launch on, with, step label): the node with each partner, then
    the partners in a ring among themselves. The partners' own pairs are what tell a node slow
    with every partner (the straggler) from a partner slow with everyone."""
    if node in partners or len(set(partners)) != len(partners):
        raise ValueError(f"partners of {node} must be other nodes, each once: {partners}")
    steps = [(node, p, f"pair {node} {p}") for p in partners]
    ring = (
        list(zip(partners, partners[1:] + partners[:1], strict=False))
        if len(partners) > 2
        else list(itertools.pairwise(partners))
    )
    return steps + [(a, b, f"pair {a} {b}") for a, b in ring]


def plan_label(node: str, partners: list[str]) -> str:
    """The first step of a pairs transcript: which node is judged, with which partners."""
    return " ".join(["plan", node, *partners])


def judge_nccl_pairs(text: str, profile: GpuProfile | None) -> CheckResult:
    """A node's pair runs (and its partners' among themselves) judged together: a pass needs
    the node at or above the profile's multi-node floor with a partner; a node slow with every
    partner, each fast with another node, is the straggler and fails. Every pair of the plan
    (the first step) must be there: a transcript that lost one is cut short."""
    from fleetctl.checks.stragglers import localise_by_pairs
    from fleetctl.checks.transcript import read_transcript

    steps = read_transcript(text)
    plan = steps[0].label.split() if steps else []
    if len(plan) < 3 or plan[0] != "plan":
        raise UnjudgeableOutput("no pair plan in the output (expected '### fleetctl step: plan NODE PARTNER...' first)")
    node, partners = plan[1], plan[2:]
    by_label = {s.label: s for s in steps[1:]}
    pairs = []
    for a, b, label in pair_plan(node, partners):
        if label not in by_label:
            raise UnjudgeableOutput(f"no '{label}' step: the run was cut short")
        pairs.append((by_label[label], a, b))
    busbw: dict[tuple[str, str], float] = {}
    findings: list[Finding] = []
    for step, a, b in pairs:
        try:
            run = judge_nccl(step.body, None)
        except UnjudgeableOutput as exc:
            raise UnjudgeableOutput(f"pair {a}-{b}: {exc}") from None
        if run.status is Status.FAIL:
            # Died or corrupted data: someone in the pair is broken; which one, the pairs say.
            busbw[(a, b)] = 0.0
            findings.append(
                Finding(
                    f"pair with {b if a == node else a}: {run.reason}",
                    f"pair {a}-{b}",
                    "fail" if node in (a, b) else "info",
                )
            )
            continue
        if run.metrics["hosts"] != 2:
            raise UnjudgeableOutput(f"pair {a}-{b} ran on {run.metrics['hosts']} host(s), not 2: not a multi-node run")
        if run.metrics["largest_size_bytes"] < MIN_SIZE_FOR_BANDWIDTH_BYTES:
            raise UnjudgeableOutput(f"pair {a}-{b}: largest size under 1 GiB, no bandwidth to judge")
        busbw[(a, b)] = run.metrics["busbw_gbps"]
    mine = {(b if a == node else a): v for (a, b), v in busbw.items() if node in (a, b)}
    metrics = {
        "pairs": {f"{a}-{b}": v for (a, b), v in busbw.items()},
        "partners": sorted(mine),
        "min_busbw_gbps": min(mine.values()),
        "max_busbw_gbps": max(mine.values()),
        "straggler": False,
    }
    if profile is None:
        failed = [f for f in findings if f.severity == "fail"]
        return verdict(
            failed,
            metrics,
            f"{len(mine)} pair(s), busbw {metrics['min_busbw_gbps']:g} GB/s and up; "
            "no profile, no multi-node floor applied",
        )
    floor = profile.nccl_multinode_busbw_gbps
    fast = {p: v for p, v in mine.items() if v >= floor.fail}
    if len(fast) == len(mine):
        findings = [
            f for p, v in sorted(mine.items()) if (f := floor.judge(v, f"busbw with {p}", "GB/s", f"pair {node}-{p}"))
        ]
        return verdict(
            findings,
            metrics,
            f"busbw {metrics['min_busbw_gbps']:g} GB/s or more with each of "
            f"{len(mine)} partner(s), floor {floor.fail:g}",
        )
    verdicts = localise_by_pairs(busbw, floor.fail)
    if verdicts[node].straggler:
        metrics["straggler"] = True
        return verdict([Finding(f"{verdicts[node].reason} (floor {floor.fail:g} GB/s)"), *findings], metrics, "")
    if fast:
        # This node is fast with a partner: what is slow is the other node or its link.
        suspects = [p for p in mine if p not in fast]
        findings = [Finding(f"slow with {p} ({mine[p]:g} GB/s): {verdicts[p].reason}", p, "info") for p in suspects]
        return verdict(
            findings,
            metrics,
            f"busbw {max(fast.values()):g} GB/s with {', '.join(sorted(fast))}; "
            f"slow only with {', '.join(sorted(suspects))}",
        )
    return CheckResult(
        Status.ERROR,
        metrics,
        findings,
        f"slow with every partner, and the pairs cannot say it is this node: {verdicts[node].reason}",
    )
