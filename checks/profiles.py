"""GPU profiles: what a healthy node of each kind looks like, read from packaged YAML files."""

from __future__ import annotations

from dataclasses import dataclass, fields
from functools import cache
from importlib import resources

import yaml

from checks.result import Finding


class UnknownProfile(ValueError):
    pass


@dataclass(frozen=True)
class Floor:
    """A higher-is-better threshold: below `warn` is a warning, below `fail` a failure."""

    warn: float
    fail: float

    def judge(self, value: float, what: str, unit: str, where: str | None = None) -> Finding | None:
        severity = "fail" if value < self.fail else "warn" if value < self.warn else None
        if severity is None:
            return None
        limit = self.fail if severity == "fail" else self.warn
        return Finding(f"{what} {value:g} {unit} is below {limit:g} {unit}", where, severity)


@dataclass(frozen=True)
class Ceiling:
    """A lower-is-better threshold: above `warn` is a warning, above `fail` a failure."""

    warn: float
    fail: float

    def judge(self, value: float, what: str, unit: str, where: str | None = None) -> Finding | None:
        severity = "fail" if value > self.fail else "warn" if value > self.warn else None
        if severity is None:
            return None
        limit = self.fail if severity == "fail" else self.warn
        return Finding(f"{what} {value:g} {unit} is above {limit:g} {unit}", where, severity)


@dataclass(frozen=True)
class GpuProfile:
    name: str
    description: str
    gpu_count: int
    # Substrings of nvidia-smi's product name ("NVIDIA H100 80GB HBM3") that identify the model.
    gpu_name_patterns: tuple[str, ...]
    nccl_allreduce_busbw_gbps: Floor  # single node, out-of-place, at the largest size (>= 1 GiB)
    # Two nodes over the fabric (one rank per GPU), out-of-place, at the largest size (>= 1 GiB).
    nccl_multinode_busbw_gbps: Floor
    hpl_gflops_per_gpu: Floor
    hbm_bandwidth_gbps: Floor  # device memory bandwidth (nvbandwidth / DCGM memory bandwidth)
    pcie_bandwidth_gbps: Floor  # host<->device copy bandwidth per GPU
    ib_rate_gbps: float  # expected link rate of every InfiniBand compute port
    ib_port_count: int  # InfiniBand compute rails that must be Active/LinkUp (0: the fabric is not InfiniBand)
    ib_write_bw_gbps: Floor  # perftest ib_write_bw average, one port
    gpu_temperature_c: Ceiling
    memory_temperature_c: Ceiling
    ecc_corrected_volatile: Ceiling  # correctable ECC errors since the last driver load
    # Uncorrectable volatile ECC errors always fail; remap rules are in nvidia_smi.py because
    # they are NVIDIA's (pending -> reset, failure -> RMA), not a per-model number.
    remap_histogram_low_fail: int  # banks with "Low" remap availability at which to fail
    # RDMA rails with link layer Ethernet (RoCE) that must be Active/LinkUp at roce_rate_gbps.
    # 0: Ethernet ports are not compute rails (management, storage, unused) and are not judged.
    roce_port_count: int
    roce_rate_gbps: float

    def matches_gpu_name(self, product_name: str) -> bool:
        return any(p.lower() in product_name.lower() for p in self.gpu_name_patterns)


_THRESHOLD_TYPES = {
    f.name: f.type for f in fields(GpuProfile) if f.type in ("Floor", "Ceiling")
}


def profile_names() -> list[str]:
    folder = resources.files("checks") / "profiles"
    return sorted(p.name[: -len(".yaml")] for p in folder.iterdir() if p.name.endswith(".yaml"))


@cache
def load_profile(name: str) -> GpuProfile:
    names = profile_names()
    if name not in names:
        raise UnknownProfile(f"unknown GPU profile {name!r}; known profiles: {', '.join(names)}")
    raw = yaml.safe_load((resources.files("checks") / "profiles" / f"{name}.yaml").read_text())
    values = dict(raw)
    for key, kind in _THRESHOLD_TYPES.items():
        values[key] = (Floor if kind == "Floor" else Ceiling)(**raw[key])
    values["gpu_name_patterns"] = tuple(raw["gpu_name_patterns"])
    if values["name"] != name:
        raise ValueError(f"profile file {name}.yaml names itself {values['name']!r}")
    return GpuProfile(**values)
