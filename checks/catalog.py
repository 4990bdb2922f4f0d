"""The check catalog: which command each check runs on a node and which parser judges it.

The argv here is a contract: the SSH executor runs it verbatim and the simulated node
answers it in the real tool's format, so change it only together with both of them.
"""

from __future__ import annotations

from dataclasses import dataclass

from fleetctl.checks.profiles import GpuProfile
from fleetctl.checks.storage import MAX_NVME
from fleetctl.checks.transcript import marker

# Fields of the CSV query, in this order. `--format=csv` (not `nounits`) keeps units in the
# header and cells ("700.00 W"); the parser reads both forms.
NVIDIA_SMI_QUERY_FIELDS: tuple[str, ...] = (
    "index",
    "name",
    "uuid",
    "serial",
    "pci.bus_id",
    "driver_version",
    "vbios_version",
    "temperature.gpu",
    "temperature.memory",
    "power.draw",
    "power.limit",
    "clocks_event_reasons.active",
    "ecc.errors.corrected.volatile.total",
    "ecc.errors.uncorrected.volatile.total",
    "ecc.errors.uncorrected.aggregate.total",
    "remapped_rows.correctable",
    "remapped_rows.uncorrectable",
    "remapped_rows.pending",
    "remapped_rows.failure",
    "pcie.link.gen.current",
    "pcie.link.gen.max",
    "pcie.link.width.current",
    "pcie.link.width.max",
)


@dataclass(frozen=True)
class CheckSpec:
    name: str
    kind: str  # one of checks.KINDS: which parser judges the output
    argv: tuple[str, ...]
    typical_duration_s: float
    description: str
    # "" runs argv on the node. "rails": argv lists the rails, a script built from its output
    # tests each (checks.ib.rails_script). "pairs": argv is the program MPI runs on each pair
    # of nodes (checks.nccl.pair_plan); the worker puts the outputs together. "bmc": not run
    # on the node; argv ("redfish", REPORT) names what the node's BMC is read for
    # (fleetctl.bmc: Bmc.health_report), as the chassis checks do.
    plan: str = ""
    # The argv position that holds the number of GPUs (ranks) the tool runs on: the node's
    # profile's gpu_count replaces it when the check runs (argv_for); the catalog's figure, 8,
    # is an HGX node's. None: the argv names no GPU count.
    gpu_count_at: int | None = None
    # The check applies only to nodes whose profile has a multi-node NVLink domain
    # (nvlink_domain_gpus, a GB200 NVL72 rack): on any other node it is not run, not recorded
    # and not counted (applies_to). A suite may list it for every profile.
    nvlink_domain_only: bool = False

    def argv_for(self, profile: GpuProfile | None) -> tuple[str, ...]:
        """The argv to run on a node of `profile`: its GPU count where the tool takes one
        (a profile unknown keeps the catalog's count: the tool then refuses what the node lacks)."""
        if self.gpu_count_at is None or profile is None:
            return self.argv
        argv = list(self.argv)
        argv[self.gpu_count_at] = str(profile.gpu_count)
        return tuple(argv)

    def applies_to(self, profile: GpuProfile | None) -> bool:
        """Whether the check judges a node of `profile`. A node whose profile is not known is
        not known to lack a domain: the check runs, and judges what the node answers."""
        return not self.nvlink_domain_only or profile is None or profile.nvlink_domain_gpus > 0


# The reason a check that does not apply to a node reports (CheckActivities.run_check): its
# outcome has no recorded run (check_run_id None), so nothing counts it as evidence.
NOT_APPLICABLE = "not applicable"


_SPECS = (
    CheckSpec(
        "nvidia-smi-query",
        "nvidia-smi",
        ("nvidia-smi", f"--query-gpu={','.join(NVIDIA_SMI_QUERY_FIELDS)}", "--format=csv"),
        2.0,
        "GPU count and model, driver, VBIOS, ECC, remapped rows, throttle reasons, temperature, power, PCIe link",
    ),
    # The same query judged for the GPUs' memory alone: what a runbook asks after a GPU reset
    # to tell a memory that must go back to the vendor from anything burn-in judges again.
    CheckSpec(
        "nvidia-smi-memory",
        "nvidia-smi-memory",
        ("nvidia-smi", f"--query-gpu={','.join(NVIDIA_SMI_QUERY_FIELDS)}", "--format=csv"),
        2.0,
        "GPU memory alone: uncorrectable ECC since the driver's load, row remap failed or pending, spare rows",
    ),
    CheckSpec(
        "nvidia-smi-q",
        "nvidia-smi",
        ("nvidia-smi", "-q"),
        3.0,
        "Full per-GPU report: the same facts as the query plus the remap histogram",
    ),
    CheckSpec(
        "xid-scan",
        "xid",
        # -T gives wall-clock timestamps, which the events keep; the parser also reads
        # plain dmesg and journalctl -k lines.
        ("dmesg", "-T"),
        1.0,
        "Kernel log XID errors, each mapped to NVIDIA's recommended action",
    ),
    # dcgmi diag runs with -j everywhere: JSON survives DCGM's table-layout changes
    # between 2.x and 3.x; the parser still reads the text table from operators' pastes.
    CheckSpec(
        "dcgm-r1",
        "dcgm",
        ("dcgmi", "diag", "-r", "1", "-j"),
        15.0,
        "DCGM quick diagnostic: deployment and software checks",
    ),
    CheckSpec(
        "dcgm-r2",
        "dcgm",
        ("dcgmi", "diag", "-r", "2", "-j"),
        120.0,
        "DCGM medium diagnostic: adds PCIe bandwidth, memory and short stress tests",
    ),
    CheckSpec(
        "dcgm-r3",
        "dcgm",
        ("dcgmi", "diag", "-r", "3", "-j"),
        900.0,
        "DCGM long diagnostic: adds targeted stress, targeted power, memory bandwidth and diagnostic burn",
    ),
    # DCGM's level 4 (DCGM 3.x/4.x): level 3 plus Pulse Test, SM Stress, Memtest, and the
    # Extended Utility Diagnostics where the node has NVIDIA's EUD package (DCGM's "eud" plugin;
    # without it the EUD entry is absent or skipped). Hours long: no shipped suite runs it, a
    # site's burn-in suite lists it (docs/checks.md).
    CheckSpec(
        "dcgm-r4",
        "dcgm",
        ("dcgmi", "diag", "-r", "4", "-j"),
        2700.0,
        "DCGM extended diagnostic: level 3 plus pulse test, SM stress, memtest and EUD where installed",
    ),
    # What DCGM's background watches found since they were set (dcgmi health -s a, set by
    # nv-hostengine's deployment): the sweep reads it in a second, no load on the GPUs.
    CheckSpec(
        "dcgm-health",
        "dcgm-health",
        ("dcgmi", "health", "-c"),
        1.0,
        "DCGM health watches: memory, PCIe, NVLink, thermal, power and driver incidents since the watches were set",
    ),
    CheckSpec(
        "nccl-allreduce",
        "nccl",
        ("all_reduce_perf", "-b", "8", "-e", "8G", "-f", "2", "-g", "8"),
        90.0,
        "Single-node NCCL all-reduce over every GPU of the node (-g: the profile's count), 8 B to 8 GiB; "
        "judged on bus bandwidth at 8 GiB",
        gpu_count_at=-1,
    ),
    CheckSpec(
        "hpl",
        "hpl",
        # xhpl reads HPL.dat from its working directory, which the node image provides.
        ("mpirun", "--bind-to", "none", "-np", "8", "xhpl"),
        600.0,
        "NVIDIA HPL over every GPU of the node (one rank each: the profile's count): sustained TFLOPS per GPU "
        "and the residual check",
        gpu_count_at=4,
    ),
    CheckSpec(
        "ib-ports",
        "ib",
        ("ibstat",),
        1.0,
        "InfiniBand HCA ports: state, physical state, rate, firmware",
    ),
    CheckSpec(
        "ib-bw",
        "ib",
        # A loopback through the HCA's own port: needs no peer node, so it runs on an
        # idle node alone. The server starts first; the client connects to localhost.
        (
            "sh",
            "-c",
            "ib_write_bw -d mlx5_0 -F --report_gbits -D 10 >/dev/null & sleep 1; "
            "ib_write_bw -d mlx5_0 -F --report_gbits -D 10 localhost; wait",
        ),
        15.0,
        "RDMA write bandwidth through mlx5_0 (perftest ib_write_bw, loopback)",
    ),
    CheckSpec(
        "ib-rails",
        "ib-rails",
        ("ibstat",),
        # Per rail: the server starts, 1 s, a 5 s client run; counters read before and after.
        75.0,
        "Every rail: ib_write_bw loopback through each HCA ibstat lists, and each InfiniBand "
        "rail's error counters (perfquery) judged by their increase over the run",
        plan="rails",
    ),
    CheckSpec(
        "nccl-pairs",
        "nccl-pairs",
        # -g 1: one rank per GPU, MPI places them (pair_argv); 1 to 8 GiB, where bus
        # bandwidth says what the fabric carries.
        ("all_reduce_perf", "-b", "1G", "-e", "8G", "-f", "2", "-g", "1"),
        # Three pairs (the node with two partners, the partners together), ~20 s each.
        60.0,
        "Two-node NCCL all-reduce of the node with each of two partners (and of the partners "
        "together), judged against the profile's multi-node floor; a node slow with every "
        "partner is the straggler",
        plan="pairs",
    ),
    CheckSpec(
        "firmware-inventory",
        "firmware",
        ("nvidia-smi", "--query-gpu=index,pci.bus_id,vbios_version", "--format=csv"),
        2.0,
        "GPU VBIOS versions, compared with the fleet baseline",
    ),
    CheckSpec(
        "nic-firmware",
        "firmware",
        ("mlxfwmanager", "--query"),
        5.0,
        "ConnectX firmware versions (mlxup/mlxfwmanager device listing)",
    ),
)


def _steps(*steps: tuple[str, str]) -> tuple[str, ...]:
    """argv of one shell run of several commands, each output under its step marker
    (checks.transcript), for the host checks that read more than one file or tool."""
    return ("sh", "-c", "; ".join(f"echo '{marker(label)}'; {command}" for label, command in steps))


# The host around the GPUs (checks/host.py): each judged against the profile's host_* figures
# and its lists of services, mounts and versions. Reading only: none of them changes the node.
_HOST_SPECS = (
    CheckSpec(
        "pcie-link",
        "pcie",
        ("lspci", "-vv"),
        2.0,
        "PCIe links of the GPUs, NVSwitches and ConnectX NICs: trained width (and a NIC's speed) against capability, GPUs on the bus",
    ),
    CheckSpec(
        "pcie-aer",
        "pcie-aer",
        (
            "sh",
            "-c",
            "grep -H -s . /sys/bus/pci/devices/*/aer_dev_correctable /sys/bus/pci/devices/*/aer_dev_fatal "
            "/sys/bus/pci/devices/*/aer_dev_nonfatal",
        ),
        1.0,
        "PCIe AER error counters since boot (sysfs aer_dev_*): fatal and non-fatal uncorrectable, correctable against the profile",
    ),
    CheckSpec(
        "host-memory",
        "memory",
        _steps(
            ("meminfo", "cat /proc/meminfo"),
            ("edac", "grep -H -s . /sys/devices/system/edac/mc/mc*/ce_count /sys/devices/system/edac/mc/mc*/ue_count"),
        ),
        1.0,
        "System memory (MemTotal) against the profile, EDAC corrected and uncorrected memory errors since boot",
    ),
    CheckSpec("host-cpu", "cpu", ("lscpu",), 1.0, "CPUs online against the profile, none offline"),
    CheckSpec(
        "host-disk",
        "disk",
        _steps(("df", "df -P"), ("df -i", "df -Pi"), ("mounts", "cat /proc/mounts")),
        2.0,
        "Filesystems: space and inodes used, none read-only, the profile's required mounts present",
    ),
    CheckSpec(
        "host-services",
        "services",
        (
            "systemctl",
            "show",
            "-p",
            "Id,LoadState,ActiveState,SubState",
            "nvidia-persistenced.service",
            "nvidia-fabricmanager.service",
            "nvidia-imex.service",
        ),
        1.0,
        "nvidia-persistenced, nvidia-fabricmanager (NVSwitch systems) and nvidia-imex (GB200) running, as the profile requires",
    ),
    CheckSpec(
        "host-versions",
        "versions",
        _steps(
            ("module", "cat /proc/driver/nvidia/version"),
            ("driver", "nvidia-smi --query-gpu=driver_version --format=csv,noheader"),
            ("kernel", "uname -r"),
        ),
        2.0,
        "The loaded NVIDIA kernel module against the installed driver, both and the kernel against the fleet baseline",
    ),
    CheckSpec(
        "host-nvme",
        "nvme",
        _steps(*((f"nvme{i}", f"nvme smart-log /dev/nvme{i} -o json 2>&1 || true") for i in range(MAX_NVME))),
        2.0,
        "NVMe drives' SMART/health log: critical-warning bits, media errors, spare and wear (nvme-cli)",
    ),
    CheckSpec(
        "host-clock",
        "clock",
        ("chronyc", "tracking"),
        1.0,
        "Clock synchronised (chrony) and its offset against the profile",
    ),
)

# The chassis, read from the node's BMC over Redfish (checks/chassis.py), not from the node:
# they see a fan, a power supply or the BMC's event log even when the node is down.
_CHASSIS_SPECS = (
    CheckSpec(
        "bmc-log",
        "bmc-log",
        ("redfish", "log"),
        5.0,
        "BMC event logs (SEL and Redfish events of every system and manager): critical and warning entries",
        plan="bmc",
    ),
    CheckSpec(
        "bmc-sensors",
        "bmc-sensors",
        ("redfish", "sensors"),
        5.0,
        "BMC sensors (Redfish Thermal and Power): temperatures, fans, power supplies and voltages against their thresholds",
        plan="bmc",
    ),
)

# The multi-node NVLink domain (GB200 NVL72): only on nodes whose profile has one.
_DOMAIN_SPECS = (
    CheckSpec(
        "imex",
        "imex",
        # -N: the whole domain's status as this tray's IMEX daemon sees it (NVIDIA IMEX guide,
        # "The nvidia-imex-ctl Tool"); the config file's default path names the daemon.
        ("nvidia-imex-ctl", "-N"),
        2.0,
        "IMEX domain (GB200 NVL72): every tray's daemon READY, every pair connected, the domain UP",
        nvlink_domain_only=True,
    ),
)

CHECKS: dict[str, CheckSpec] = {spec.name: spec for spec in (*_SPECS, *_HOST_SPECS, *_DOMAIN_SPECS, *_CHASSIS_SPECS)}
