"""The simulated node's shell: unwraps launchers (sudo, timeout, mpirun, srun), parses each
tool's argv as the real tool does, runs `sh -c` scripts in a tiny shell, and hands the node
state to the tool's renderer in `fleetctl.sim.render`."""

from __future__ import annotations

import os
import random
import re
import shlex
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import overload

from fleetctl.sim.faults import CURED_BY
from fleetctl.sim.node import HcaState, NodeState, ToolOutput
from fleetctl.sim.render.dcgm import render_dcgmi_diag, render_dcgmi_health
from fleetctl.sim.render.firmware import (
    render_flint_query,
    render_mlxfwmanager,
    render_mlxfwmanager_update,
    render_nvfwupd_show_version,
)
from fleetctl.sim.render.host import (
    render_chronyc_tracking,
    render_df,
    render_driver_version_file,
    render_grep_files,
    render_lscpu,
    render_lspci,
    render_meminfo,
    render_mounts,
    render_nvme_smart_log,
    render_systemctl_show,
    render_uname_r,
)
from fleetctl.sim.render.hpl import render_hpl
from fleetctl.sim.render.ib import IbWriteBwRun, render_ib_write_bw, render_ibstat, render_ibv_devinfo, render_perfquery
from fleetctl.sim.render.imex import render_imex_ctl_domain
from fleetctl.sim.render.nccl import AllReduceRun, render_all_reduce_perf
from fleetctl.sim.render.nvidia_smi import render_nvidia_smi_q, render_nvidia_smi_query, render_nvidia_smi_reset
from fleetctl.sim.render.xid import render_kernel_log


@dataclass(frozen=True)
class ToolRun:
    output: ToolOutput
    seconds: float  # how long the real tool would take
    # Fault kinds the run repaired (a GPU reset, a firmware update); the executor clears them.
    cures: frozenset[str] = frozenset()


class _UsageError(Exception):
    pass


_SIZE_UNITS = {"": 1, "K": 1024, "M": 1024**2, "G": 1024**3}


def _bytes(text: str) -> int:
    """nccl-tests and perftest sizes: 8, 256M, 8G, 1KB."""
    match = re.fullmatch(r"(\d+)([KMGkmg]?)[Bb]?", text)
    if not match:
        raise _UsageError(f"invalid size {text!r}")
    return int(match[1]) * _SIZE_UNITS[match[2].upper()]


def _options(args: Sequence[str], with_value: set[str]) -> tuple[dict[str, str], list[str]]:
    """Split argv into {flag: value} (value "" for switches) and positional arguments.
    Accepts `--flag=value`, `--flag value` and `-f value` for flags in `with_value`."""
    flags: dict[str, str] = {}
    positional: list[str] = []
    items = iter(args)
    for arg in items:
        if arg.startswith("-") and len(arg) > 1:
            name, eq, value = arg.partition("=")
            if not eq and name in with_value:
                following = next(items, None)
                if following is None:
                    raise _UsageError(f"option {name} needs a value")
                value = following
            flags[name] = value
        else:
            positional.append(arg)
    return flags, positional


@overload
def _flag(flags: dict[str, str], *names: str, default: str) -> str: ...
@overload
def _flag(flags: dict[str, str], *names: str, default: None = None) -> str | None: ...
def _flag(flags: dict[str, str], *names: str, default: str | None = None) -> str | None:
    """The value of the first of `names` given, else `default` (a str when one is given)."""
    return next((flags[n] for n in names if n in flags), default)


@dataclass(frozen=True)
class _Call:
    node: NodeState
    args: list[str]
    rng: random.Random
    ranks: int | None  # processes an MPI launcher started
    peers: tuple[NodeState, ...] = ()  # the other hosts an MPI launcher started ranks on
    at: float = 0.0  # when the command runs: the node's `now` plus the script's time so far


def _nvidia_smi(call: _Call) -> ToolRun:
    flags, _positional = _options(call.args, {"--query-gpu", "--format", "-d", "--display", "-i", "--id"})
    query = _flag(flags, "--query-gpu")
    ids = _flag(flags, "-i", "--id")
    indices = [_gpu_index(call.node, i) for i in ids.split(",")] if ids else None
    if query is not None:
        fmt = (_flag(flags, "--format") or "").split(",")
        if "csv" not in fmt:
            raise _UsageError("--query-gpu needs --format=csv")
        fields = [f.strip() for f in query.split(",") if f.strip()]
        return ToolRun(
            render_nvidia_smi_query(call.node, fields, "noheader" not in fmt, "nounits" not in fmt, indices), 0.4
        )
    if "-q" in flags or "--query" in flags:
        display = _flag(flags, "-d", "--display")
        sections = [d.strip().upper() for d in display.split(",")] if display else None
        return ToolRun(render_nvidia_smi_q(call.node, sections, indices), 1.5)
    if "-r" in flags or "--gpu-reset" in flags:
        output = render_nvidia_smi_reset(call.node, indices)
        return ToolRun(output, 8.0, CURED_BY["gpu_reset"] if output.exit_status == 0 else frozenset())
    raise _UsageError("simulated nvidia-smi answers --query-gpu=... --format=csv, -q and -r")


def _gpu_index(node: NodeState, gpu_id: str) -> int:
    """`-i`'s GPU: its index, or its PCI bus id as nvidia-smi(1) also takes it
    (domain:bus:device.function in hex; 0000:2b:00 and 00000000:2B:00.0 are the same GPU)."""
    if gpu_id.isdigit():
        return int(gpu_id)
    m = re.fullmatch(r"([0-9A-Fa-f]{4,8}):([0-9A-Fa-f]{2}):([0-9A-Fa-f]{2})(?:\.0)?", gpu_id.strip())
    found = [g.index for g in node.gpus if m is not None and int(m[2], 16) == g.bus and int(m[1], 16) == 0]
    if not found:
        raise _UsageError(f"No devices were found matching {gpu_id!r}")
    return found[0]


_DCGM_LEVELS = {"1": 1, "short": 1, "2": 2, "medium": 2, "3": 3, "long": 3, "4": 4, "xlong": 4}
_DCGM_SECONDS = {1: 15.0, 2: 120.0, 3: 900.0, 4: 2700.0}


def _dcgmi(call: _Call) -> ToolRun:
    flags, positional = _options(call.args, {"-r", "--run", "-g", "--group", "-p", "--parameters", "-i"})
    if positional[:1] == ["health"] and ("-c" in flags or "--check" in flags):
        return ToolRun(render_dcgmi_health(call.node), 0.5)
    level = _DCGM_LEVELS.get(_flag(flags, "-r", "--run") or "")
    if positional[:1] != ["diag"] or level is None:
        raise _UsageError("simulated dcgmi answers `diag -r 1|2|3|4 [-j]` and `health -c`")
    as_json = "-j" in flags or "--json" in flags
    return ToolRun(render_dcgmi_diag(call.node, level, as_json), _DCGM_SECONDS[level])


_NCCL_VALUE_FLAGS = {f"-{short}" for short in "betfignwcdoarmpzGCNRTy"} | {
    "--minbytes",
    "--maxbytes",
    "--stepfactor",
    "--stepbytes",
    "--ngpus",
    "--nthreads",
    "--iters",
    "--warmup_iters",
    "--check",
    "--datatype",
    "--op",
}


def _all_reduce_perf(call: _Call) -> ToolRun:
    flags, _ = _options(call.args, _NCCL_VALUE_FLAGS)
    run = AllReduceRun(
        min_bytes=_bytes(_flag(flags, "-b", "--minbytes", default="32M")),
        max_bytes=_bytes(_flag(flags, "-e", "--maxbytes", default="32M")),
        step_factor=int(_flag(flags, "-f", "--stepfactor", default="1")),
        step_bytes=_bytes(_flag(flags, "-i", "--stepbytes", default="1M")),
        gpus=int(_flag(flags, "-g", "--ngpus", default="1")),
        threads=int(_flag(flags, "-t", "--nthreads", default="1")),
        iters=int(_flag(flags, "-n", "--iters", default="20")),
        warmup_iters=int(_flag(flags, "-w", "--warmup_iters", default="5")),
        check=int(_flag(flags, "-c", "--check", default="1")),
    )
    if run.step_factor < 2 and run.step_bytes < 1:
        raise _UsageError("all_reduce_perf needs -f >= 2 or -i >= 1 to step through sizes")
    per_node = call.ranks // (1 + len(call.peers)) if call.peers and call.ranks else None
    output, seconds = render_all_reduce_perf(call.node, run, call.rng, call.peers, per_node)
    return ToolRun(output, 15.0 + seconds)  # NCCL init and connection setup


def _xhpl(call: _Call) -> ToolRun:
    ranks = call.ranks or call.node.profile.gpu_count
    if ranks > len(call.node.gpus):
        return ToolRun(_too_many_ranks(call.node, ranks), 5.0)
    output, seconds = render_hpl(call.node, ranks, call.rng)
    return ToolRun(output, 40.0 + seconds)  # matrix generation and warm-up


def _too_many_ranks(node: NodeState, ranks: int) -> ToolOutput:
    """HPL-NVIDIA binds each local rank to the GPU of its number: a rank past the node's last
    GPU gets CUDA's 'invalid device ordinal' and Open MPI aborts the job (its banner as
    NVIDIA/nccl-tests#165 shows it), before HPL prints a result."""
    errors = "".join(
        f"[{node.hostname}:{4242 + rank}] CUDA error: invalid device ordinal (rank {rank}, device {rank})\n"
        for rank in range(len(node.gpus), ranks)
    )
    return ToolOutput("", errors + _MPI_ABORTED, 1)


def _nvidia_imex_ctl(call: _Call) -> ToolRun:
    flags, _ = _options(call.args, {"-c", "-i", "-u", "-t"})
    if "-N" not in flags:
        raise _UsageError("simulated nvidia-imex-ctl answers -N (the domain's status)")
    if not call.node.host.services.get("nvidia-imex"):
        # The tool comes with the IMEX package, installed where IMEX runs (GB200 trays).
        return ToolRun(ToolOutput("", "bash: line 1: nvidia-imex-ctl: command not found\n", 127), 0.0)
    return ToolRun(render_imex_ctl_domain(call.node), 0.3)


def _dmesg(call: _Call) -> ToolRun:
    flags, _ = _options(call.args, {"-l", "--level", "-f", "--facility"})
    style = "dmesg-T" if {"-T", "--ctime"} & flags.keys() else "dmesg"
    return ToolRun(render_kernel_log(call.node, style), 0.2)


def _journalctl(call: _Call) -> ToolRun:
    flags, _ = _options(
        call.args, {"-o", "--output", "-b", "--boot", "-S", "--since", "-U", "--until", "-n", "--lines"}
    )
    if not {"-k", "--dmesg"} & flags.keys():
        raise _UsageError("simulated journalctl answers -k (kernel messages)")
    return ToolRun(render_kernel_log(call.node, "journal"), 0.5)


def _ibstat(call: _Call) -> ToolRun:
    flags, positional = _options(call.args, set())
    if "-l" in flags or "--list_of_cas" in flags:
        return ToolRun(ToolOutput("".join(f"{h.name}\n" for h in call.node.hcas)), 0.1)
    return ToolRun(render_ibstat(call.node, positional), 0.1)


def _ibv_devinfo(call: _Call) -> ToolRun:
    flags, _ = _options(call.args, {"-d", "--ib-dev", "-i", "--ib-port"})
    device = _flag(flags, "-d", "--ib-dev")
    verbose = bool({"-v", "-vv", "--verbose"} & flags.keys())
    return ToolRun(render_ibv_devinfo(call.node, [device] if device else [], verbose), 0.1)


_PERFTEST_VALUE_FLAGS = {
    *(f"-{c}" for c in "dsqDnxmpTiutQlIwSrE"),
    "--ib-dev",
    "--size",
    "--qp",
    "--duration",
    "--iters",
    "--port",
    "--mtu",
    "--gid-index",
    "--tos",
    "--source_ip",
    "--ib-port",
    "--tx-depth",
    "--rx-depth",
}


def _ib_write_bw(call: _Call) -> ToolRun:
    flags, positional = _options(call.args, _PERFTEST_VALUE_FLAGS)
    duration = _flag(flags, "-D", "--duration")
    run = IbWriteBwRun(
        device=_flag(flags, "-d", "--ib-dev", default=call.node.hcas[0].name),
        size=_bytes(_flag(flags, "-s", "--size", default="65536")),
        qps=int(_flag(flags, "-q", "--qp", default="1")),
        duration_s=float(duration) if duration is not None else None,
        iterations=int(_flag(flags, "-n", "--iters", default="5000")),
        report_gbits="--report_gbits" in flags,
        server=positional[0] if positional else None,
        sweep="-a" in flags or "--all" in flags,
    )
    output, seconds = render_ib_write_bw(call.node, run, call.rng)
    return ToolRun(output, 1.5 + seconds)


def _perfquery(call: _Call) -> ToolRun:
    flags, positional = _options(call.args, {"-C", "--Ca", "-P", "--Port"})
    device = _flag(flags, "-C", "--Ca")
    if device is None or positional or not {"-x", "--extended"} & flags.keys():
        raise _UsageError("simulated perfquery answers `-x -C DEVICE -P PORT` (the local port's extended counters)")
    return ToolRun(render_perfquery(call.node, device, int(_flag(flags, "-P", "--Port", default="1")), call.at), 0.1)


def _hca_named(node: NodeState, device: str) -> HcaState | None:
    """flint's -d: mlx5_N, /dev/mst/mt4129_pciconfN or a PCI address (37:00.0)."""
    adapters = [h for h in node.hcas if h.ca_type == node.profile.hca.ca_type]
    if match := re.fullmatch(r"/dev/mst/mt\d+_pciconf(\d+)", device):
        index = int(match[1])
        return adapters[index] if index < len(adapters) else None
    if match := re.fullmatch(r"(?:0000:)?([0-9a-fA-F]{2}):00\.0", device):
        return next((h for h in adapters if h.pci_bus == int(match[1], 16)), None)
    return next((h for h in adapters if h.name == device), None)


def _flint(call: _Call) -> ToolRun:
    flags, positional = _options(call.args, {"-d", "--device", "-i", "--image"})
    device = _flag(flags, "-d", "--device")
    if device is None or positional[:1] not in (["query"], ["q"]):
        raise _UsageError("simulated flint answers `-d DEVICE query`")
    hca = _hca_named(call.node, device)
    if hca is None:
        return ToolRun(
            ToolOutput("", f'-E- Cannot open Device: "{device}". No such file or directory. MFE_CR_ERROR\n', 1), 0.5
        )
    return ToolRun(render_flint_query(call.node, hca), 2.0)


def _mlxfwmanager(call: _Call) -> ToolRun:
    flags, _ = _options(call.args, {"-d", "--dev", "-i", "--image-file", "--log", "-L", "--log-file"})
    if {"-u", "--update"} & flags.keys():
        return ToolRun(render_mlxfwmanager_update(call.node), 120.0, CURED_BY["firmware_update"])
    if not {"--query", "-q"} & flags.keys():
        raise _UsageError("simulated mlxfwmanager answers --query and -u")
    return ToolRun(render_mlxfwmanager(call.node), 6.0)


# The files `cat` can read on a simulated node.
_FILES: dict[str, Callable[[NodeState], str]] = {
    "/proc/sys/kernel/random/boot_id": lambda node: node.boot_id + "\n",
    "/proc/meminfo": render_meminfo,
    "/proc/mounts": render_mounts,
    "/proc/driver/nvidia/version": render_driver_version_file,
}


def _grep(call: _Call) -> ToolRun:
    """`grep -H -s . FILE...` over the sysfs counters the host checks read (the shell's globs
    are expanded against the node's own files); exit 2 when no file matched, as grep does."""
    flags, positional = _options(call.args, set())
    if positional[:1] != ["."] or not {"-H", "-s"} <= flags.keys():
        raise _UsageError("simulated grep answers grep -H -s . FILE...")
    output = render_grep_files(call.node, positional[1:])
    return ToolRun(ToolOutput(output, "", 0 if output else 2), 0.05)


def _df(call: _Call) -> ToolRun:
    flags, _ = _options(call.args, set())
    if "-P" not in flags and "-Pi" not in flags:
        raise _UsageError("simulated df answers df -P and df -Pi")
    return ToolRun(ToolOutput(render_df(call.node, inodes="-Pi" in flags or "-i" in flags)), 0.1)


def _systemctl(call: _Call) -> ToolRun:
    _flags, positional = _options(call.args, {"-p", "--property"})
    if positional[:1] != ["show"]:
        raise _UsageError("simulated systemctl answers systemctl show -p ... UNIT...")
    return ToolRun(ToolOutput(render_systemctl_show(call.node, positional[1:])), 0.1)


def _uname(call: _Call) -> ToolRun:
    if call.args != ["-r"]:
        raise _UsageError("simulated uname answers uname -r")
    return ToolRun(ToolOutput(render_uname_r(call.node)), 0.0)


def _chronyc(call: _Call) -> ToolRun:
    if call.args != ["tracking"]:
        raise _UsageError("simulated chronyc answers chronyc tracking")
    return ToolRun(ToolOutput(render_chronyc_tracking(call.node)), 0.1)


def _lspci(call: _Call) -> ToolRun:
    flags, _ = _options(call.args, set())
    if not {"-vv", "-vvv"} & flags.keys():
        raise _UsageError("simulated lspci answers lspci -vv")
    return ToolRun(ToolOutput(render_lspci(call.node)), 0.5)


def _cat(call: _Call) -> ToolRun:
    out, err, status = [], [], 0
    for path in call.args:
        if path in _FILES:
            out.append(_FILES[path](call.node))
        else:
            err.append(f"cat: {path}: No such file or directory\n")
            status = 1
    return ToolRun(ToolOutput("".join(out), "".join(err), status), 0.0)


def _nvfwupd(call: _Call) -> ToolRun:
    flags, positional = _options(call.args, {"-t", "--target", "-p", "--package", "-c", "--config"})
    if "show_version" not in positional:
        raise _UsageError("simulated nvfwupd answers show_version")
    with_package = bool({"-p", "--package"} & flags.keys())
    as_json = "-j" in flags or "--json" in flags
    return ToolRun(render_nvfwupd_show_version(call.node, with_package, as_json), 10.0)


def _nvme(call: _Call) -> ToolRun:
    if call.args[:1] != ["smart-log"] or len(call.args) < 2:
        raise _UsageError("simulated nvme answers nvme smart-log DEVICE -o json")
    return ToolRun(render_nvme_smart_log(call.node, call.args[1]), 0.1)


def _sleep(call: _Call) -> ToolRun:
    return ToolRun(ToolOutput(""), sum(float(a.rstrip("s")) for a in call.args))


_TOOLS: dict[str, Callable[[_Call], ToolRun]] = {
    "nvidia-smi": _nvidia_smi,
    "dcgmi": _dcgmi,
    "all_reduce_perf": _all_reduce_perf,
    "xhpl": _xhpl,
    "hpl.sh": _xhpl,
    "dmesg": _dmesg,
    "nvidia-imex-ctl": _nvidia_imex_ctl,
    "journalctl": _journalctl,
    "ibstat": _ibstat,
    "ibv_devinfo": _ibv_devinfo,
    "ib_write_bw": _ib_write_bw,
    "flint": _flint,
    "mstflint": _flint,
    "mlxfwmanager": _mlxfwmanager,
    "mlxup": _mlxfwmanager,
    "nvfwupd": _nvfwupd,
    "nvfwupd.py": _nvfwupd,
    "sleep": _sleep,
    "cat": _cat,
    "grep": _grep,
    "df": _df,
    "systemctl": _systemctl,
    "uname": _uname,
    "chronyc": _chronyc,
    "lspci": _lspci,
    "nvme": _nvme,
    "lscpu": lambda call: ToolRun(ToolOutput(render_lscpu(call.node)), 0.1),
    "perfquery": _perfquery,
    "echo": lambda call: ToolRun(ToolOutput(" ".join(call.args) + "\n"), 0.0),
    "hostname": lambda call: ToolRun(ToolOutput(call.node.hostname + "\n"), 0.0),
    "true": lambda call: ToolRun(ToolOutput(""), 0.0),
}
# What the tools that need the driver print on a node whose loaded kernel module is not the
# installed driver (driver-mismatch): NVML and CUDA refuse to start.
_DRIVER_MISMATCH: dict[str, Callable[[NodeState], ToolOutput]] = {
    "nvidia-smi": lambda node: ToolOutput(
        "Failed to initialize NVML: Driver/library version mismatch\n"
        f"NVML library version: {node.profile.driver_version.rsplit('.', 1)[0]}\n",
        "",
        18,
    ),
    "dcgmi": lambda node: ToolOutput(
        "Error: unable to establish a connection to the specified host: localhost\n"
        "Error: Unable to connect to host engine. Host engine connection invalid/disconnected.\n",
        "",
        255,
    ),
    "all_reduce_perf": lambda node: ToolOutput(
        f"{node.hostname}: Test CUDA failure common.cu:1279 'system has unsupported display driver / cuda driver combination'\n"
        " .. {node.hostname} pid 4242: Test failure common.cu:1161\n".replace("{node.hostname}", node.hostname),
        "",
        3,
    ),
    "xhpl": lambda node: ToolOutput(
        "", "CUDA error: system has unsupported display driver / cuda driver combination\n", 1
    ),
    "hpl.sh": lambda node: ToolOutput(
        "", "CUDA error: system has unsupported display driver / cuda driver combination\n", 1
    ),
}
# The tools whose runs a `flaky` node can spoil: the ones that stress the GPUs.
STRESS_TOOLS = frozenset({"dcgmi", "all_reduce_perf", "xhpl", "hpl.sh"})

# Launcher options that take a value, so the program name can be found after them.
_LAUNCHER_VALUE_FLAGS = {
    "-np",
    "-n",
    "-c",
    "-N",
    "--np",
    "-H",
    "--host",
    "--hostfile",
    "-hostfile",
    "--map-by",
    "--bind-to",
    "--rank-by",
    "-x",
    "--npernode",
    "--ntasks",
    "--ntasks-per-node",
    "--gpus-per-node",
    "--cpu-bind",
    "--mpi",
    "-w",
    "--nodelist",
    "-p",
    "--partition",
    "-t",
    "--time",
}
_LAUNCHER_RANK_FLAGS = {"-np", "-n", "-c", "--np", "--ntasks"}


def _unwrap(argv: Sequence[str]) -> tuple[list[str], int | None, list[str]]:
    """Strip sudo/env/timeout/nice and MPI or Slurm launchers; return the program's argv, the
    number of ranks a launcher asked for and the hosts it named (`--host a:8,b:8`)."""
    args, ranks, hosts = list(argv), None, []
    while args:
        tool = os.path.basename(args[0])
        if tool in ("sudo", "env", "nice", "timeout", "stdbuf"):
            rest = args[1:]
            while rest and (rest[0].startswith("-") or "=" in rest[0]):
                rest = rest[1:]
            if tool == "timeout" and rest:
                rest = rest[1:]  # the duration
            args = rest
        elif tool in ("mpirun", "mpiexec", "srun"):
            rest = args[1:]
            while rest and rest[0].startswith("-"):
                flag, eq, value = rest[0].partition("=")
                takes_value = not eq and flag in _LAUNCHER_VALUE_FLAGS
                if flag in _LAUNCHER_RANK_FLAGS:
                    ranks = int(value if eq else rest[1])
                elif flag in ("-H", "--host") and tool != "srun":
                    hosts = [h.partition(":")[0] for h in (value if eq else rest[1]).split(",") if h]
                elif flag == "--mca":  # --mca KEY VALUE
                    rest = rest[2:]
                rest = rest[2 if takes_value else 1 :]
            args = rest
        else:
            break
    return args, ranks, hosts


# `&` ends a command unless it is part of a redirection (`2>&1`).
_SCRIPT_SPLIT = re.compile(r"(&&|\|\||;|(?<![>&])&(?![>&])|\||\n)")
_REDIRECT = re.compile(r"(\d?)>>?\s*(&1|\S+)")


# What Open MPI's mpirun prints when it cannot start its daemon on a host.
_ORTE_DIED = """--------------------------------------------------------------------------
ORTE was unable to reliably start one or more daemons.
This usually is caused by:

* not finding the required libraries and/or binaries on
  one or more nodes.
--------------------------------------------------------------------------
"""


# What Open MPI's mpirun prints when a rank exits non-zero (NVIDIA/nccl-tests#165).
_MPI_ABORTED = """--------------------------------------------------------------------------
Primary job  terminated normally, but 1 process returned
a non-zero exit code. Per user-direction, the job has been aborted.
--------------------------------------------------------------------------
"""


class NodeShell:
    """Runs commands against one node state; `sh -c` scripts get a tiny shell."""

    def __init__(
        self, node: NodeState, rng: random.Random, peer: Callable[[str], NodeState | None] = lambda host: None
    ):
        self.node = node
        self.rng = rng
        self.peer = peer  # another node of the fleet by host name (None: it does not answer)
        self.elapsed = 0.0  # seconds into the script that is running

    def run(self, argv: Sequence[str]) -> ToolRun:
        args, ranks, hosts = _unwrap(argv)
        if not args:
            return ToolRun(ToolOutput(""), 0.0)
        peers = []
        for host in hosts:
            if host == self.node.hostname:
                continue
            state = self.peer(host)
            if state is None:
                return ToolRun(
                    ToolOutput("", f"ssh: connect to host {host} port 22: Connection timed out\n" + _ORTE_DIED, 1), 30.0
                )
            peers.append(state)
        tool = os.path.basename(args[0])
        if tool in ("sh", "bash") and len(args) >= 3 and args[1] in ("-c", "-lc", "-ec"):
            return self.run_script(args[2])
        handler = _TOOLS.get(tool)
        if handler is None:
            return ToolRun(ToolOutput("", f"bash: line 1: {args[0]}: command not found\n", 127), 0.0)
        if tool in _DRIVER_MISMATCH and self.node.host.loaded_driver != self.node.profile.driver_version:
            return ToolRun(_DRIVER_MISMATCH[tool](self.node), 0.5)
        try:
            return handler(_Call(self.node, args[1:], self.rng, ranks, tuple(peers), self.node.now + self.elapsed))
        except (_UsageError, ValueError) as exc:
            return ToolRun(ToolOutput("", f"{tool}: {exc}\n", 2), 0.0)

    def run_script(self, script: str) -> ToolRun:
        """`;`, `&&`, `||`, background `&` with `wait`, and redirections to files (dropped)."""
        pieces = _SCRIPT_SPLIT.split(script)
        stdout, stderr = [], []
        cures: frozenset[str] = frozenset()
        clock = background_end = 0.0
        status, skip = 0, False
        for text, operator in zip(pieces[::2], [*pieces[1::2], ""], strict=False):
            if operator == "|":
                return ToolRun(ToolOutput("", "sh: pipelines are not simulated\n", 2), clock)
            text = text.strip()
            if text and not skip:
                self.elapsed = clock
                run = self._simple_command(text, background_end - clock)
                if operator == "&":
                    background_end = max(background_end, clock + run.seconds)
                    status = 0
                else:
                    clock += run.seconds
                    status = run.output.exit_status
                stdout.append(run.output.stdout)
                stderr.append(run.output.stderr)
                cures |= run.cures
            skip = (operator == "&&" and status != 0) or (operator == "||" and status == 0)
        return ToolRun(ToolOutput("".join(stdout), "".join(stderr), status), clock, cures)

    def _simple_command(self, text: str, background_left: float) -> ToolRun:
        redirects = _REDIRECT.findall(text)
        words = shlex.split(_REDIRECT.sub("", text))
        if words == ["wait"]:
            return ToolRun(ToolOutput(""), max(background_left, 0.0))
        run = self.run(words)
        out, err = run.output.stdout, run.output.stderr
        for stream, target in redirects:
            if stream == "2" and target == "&1":
                out, err = out + err, ""
            elif stream == "2":
                err = ""
            else:
                out = ""
        return ToolRun(ToolOutput(out, err, run.output.exit_status), run.seconds, run.cures)
