"""The simulator's output is pinned byte for byte: every tool and its variants, on every
profile, healthy and with every fault (on one GPU and on all), plus the inventory.

The digests in tests/fixtures/sim/golden.json were first taken from the simulator as it was
before it became the `fleetctl.sim` package (fleetctl/executors/sim.py and sim_render.py at
757020c) and matched after the move; the only outputs changed since were made on purpose
(`cat` of the boot id, `nvidia-smi -r`, `mlxfwmanager -u`, and the usage lines that list
them), and what was added beside them: the gb200 tray, its faults and the GPU and fabric
faults, `nvidia-imex-ctl -N`, `ibv_devinfo`, `dcgmi health -c`, the transient XID 48 (`xid48-remapped`) and the
leaf-uplink fault (which changes nothing a lone node prints: its cases equal the healthy ones); HPL's spreads cut at two
standard deviations changed what a `flaky` node's HPL prints. Every earlier profile's output of every
earlier command byte for byte the same. A refactoring that changes one byte of any output fails here. A change to the output
made on purpose regenerates them:

    .venv/bin/python -m tests.executors.test_sim_golden
"""

from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path

from fleetctl.checks.catalog import CHECKS
from fleetctl.executors.base import ExecutorError, NodeTarget
from fleetctl.sim.executor import SimExecutor
from fleetctl.sim.faults import FAULT_KINDS, SimFaultSpec
from fleetctl.sim.inventory import render_inventory
from fleetctl.sim.profiles import sim_profiles

GOLDEN = Path(__file__).parent.parent / "fixtures" / "sim" / "golden.json"
NOW = 1_750_000_000.0
NODE = "gpu-042"
SEED = 7

# Every tool the shell answers and the options that change what it prints, beyond the
# catalog's own argv (which are all included).
EXTRA_ARGVS: tuple[tuple[str, ...], ...] = (
    (
        "nvidia-smi",
        "--query-gpu=index,name,power.draw,clocks_throttle_reasons.active,memory.total",
        "--format=csv,noheader,nounits",
    ),
    ("nvidia-smi", "--query-gpu=index,temperature.gpu", "--format=csv", "-i", "1,3"),
    ("nvidia-smi", "-q", "-d", "ECC,ROW_REMAPPER,PERFORMANCE"),
    ("nvidia-smi", "-q", "-d", "TEMPERATURE", "-i", "2"),
    ("nvidia-smi", "-q", "-d", "BOGUS"),
    ("nvidia-smi", "-L"),
    ("nvidia-smi", "-r"),
    ("nvidia-smi", "-r", "-i", "3"),
    ("dcgmi", "diag", "-r", "1"),
    ("dcgmi", "diag", "-r", "long"),
    ("dcgmi", "diag", "-r", "4", "-j"),
    ("dcgmi", "diag", "-r", "9"),
    ("dmesg",),
    ("journalctl", "-k", "-b", "0"),
    ("journalctl", "-b"),
    ("all_reduce_perf", "-b", "1M", "-e", "64M", "-i", "1048576", "-g", "8", "-n", "3", "-w", "1"),
    ("all_reduce_perf", "-b", "8", "-e", "8", "-f", "1"),
    ("srun", "--ntasks=4", "--gpus-per-node", "8", "xhpl"),
    ("hpl.sh",),
    ("ibstat", "-l"),
    ("ibstat", "mlx5_1", "mlx5_8"),
    ("ibstat", "mlx5_99"),
    ("ibv_devinfo",),
    ("ibv_devinfo", "-v", "-d", "mlx5_2"),
    ("ibv_devinfo", "-d", "mlx5_99"),
    ("ib_write_bw", "-d", "mlx5_2", "-a", "--report_gbits", "localhost"),
    ("ib_write_bw", "-d", "mlx5_0", "-s", "1M", "-q", "4", "-n", "200", "localhost"),
    ("ib_write_bw", "-d", "mlx5_0", "-D"),
    ("flint", "-d", "mlx5_0", "query"),
    ("mstflint", "-d", "/dev/mst/mt4129_pciconf1", "q"),
    ("flint", "-d", "/dev/mst/mt4123_pciconf3", "q"),
    ("flint", "-d", "nope", "query"),
    ("flint", "query"),
    ("mlxup", "--query"),
    ("mlxfwmanager",),
    ("mlxfwmanager", "-u", "-y", "-i", "/opt/firmware/fw.bin", "--log", "gpu-042.log"),
    ("nvfwupd", "show_version"),
    ("nvfwupd.py", "-p", "fw.pkg", "show_version", "-j"),
    ("nvfwupd", "-j", "show_version"),
    ("sudo", "-n", "env", "A=1", "timeout", "30", "nice", "hostname"),
    ("true",),
    ("cat", "/proc/sys/kernel/random/boot_id"),
    ("sh", "-c", "dmesg -T 2>&1 && ibstat -l; false || hostname; sleep 2 & wait"),
    ("bash", "-lc", "nvidia-smi -q > /tmp/out; dcgmi diag -r 1 2>/dev/null"),
    ("sh", "-c", "ibstat | grep Rate"),
)
# A flaky node's stress runs go wrong on some runs: the n-th run of the same argv differs.
FLAKY_ARGVS = (CHECKS["dcgm-r2"].argv, CHECKS["nccl-allreduce"].argv, CHECKS["hpl"].argv)


def _result(ex: SimExecutor, profile: str, argv: tuple[str, ...]) -> list:
    target = NodeTarget(NODE, f"sim://{NODE}", profile=profile)
    try:
        r = ex.run(target, list(argv), timeout_s=1e9)
    except ExecutorError as exc:
        return [type(exc).__name__, str(exc)]
    return [r.exit_status, r.stdout, r.stderr, r.duration_s]


def _fault_sets() -> dict[str, list[SimFaultSpec]]:
    sets: dict[str, list[SimFaultSpec]] = {"healthy": []}
    for kind in FAULT_KINDS:
        sets[f"{kind}/gpu3"] = [SimFaultSpec(kind, gpu=3, seed=5)]
        sets[f"{kind}/any"] = [SimFaultSpec(kind, seed=2)]
    # A fault from before the last boot, one that is yet to appear, and one drawn by rate.
    sets["xid48/before-boot"] = [SimFaultSpec("xid48", gpu=1, not_before=NOW - 40 * 86400)]
    sets["xid79/future"] = [SimFaultSpec("xid79", gpu=1, not_before=NOW + 3600)]
    sets["xid79/rate"] = [SimFaultSpec("xid79", gpu=6, not_before=NOW - 86400, rate_per_hour=0.5, seed=3)]
    sets["several"] = [
        SimFaultSpec("thermal-throttle", gpu=0),
        SimFaultSpec("ib-port-down", gpu=4),
        SimFaultSpec("row-remap-pending", gpu=5),
        SimFaultSpec("firmware-drift", gpu=2),
    ]
    return sets


def digests() -> dict[str, str]:
    """One digest per (profile, fault set) over every argv, and one per argv over every
    profile and fault set: a change names both the case and the command."""
    argvs = sorted({spec.argv for spec in CHECKS.values()} | set(EXTRA_ARGVS))
    by_case: dict[str, hashlib._Hash] = {}
    by_argv = {argv: hashlib.sha256() for argv in argvs}
    for profile in sorted(sim_profiles()):
        for label, faults in _fault_sets().items():
            ex = SimExecutor(
                lambda name, f=faults: list(f) if name == NODE else [],
                seed=SEED,
                time_scale=1.0,
                now=lambda: NOW,
                sleep=lambda s: None,
            )
            case = by_case[f"{profile} {label}"] = hashlib.sha256()
            runs = [(argv, 0) for argv in argvs]
            if label.startswith("flaky"):
                runs += [(argv, n) for argv in FLAKY_ARGVS for n in range(1, 4)]
            for argv, n in runs:
                record = json.dumps([profile, label, n, _result(ex, profile, argv)]).encode()
                case.update(record)
                by_argv[argv].update(record)
        inventory = render_inventory(7, 3, profile, seed=SEED, name_prefix="n")
        by_case[f"{profile} inventory"] = hashlib.sha256(json.dumps(inventory).encode())
    named = {**by_case, **{" ".join(argv): h for argv, h in by_argv.items()}}
    return {key: h.hexdigest()[:24] for key, h in named.items()}


def test_simulator_output_is_unchanged() -> None:
    expected = json.loads(GOLDEN.read_text())
    actual = digests()
    changed = sorted(key for key in expected.keys() | actual.keys() if expected.get(key) != actual.get(key))
    assert changed == [], f"{len(changed)} of {len(expected)} outputs changed, first: {changed[:5]}"


if __name__ == "__main__":
    GOLDEN.write_text(json.dumps(digests(), indent=0, sort_keys=True) + "\n")
    print(f"wrote {GOLDEN}", file=sys.stderr)
