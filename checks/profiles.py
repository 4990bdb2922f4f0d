"""GPU profiles: what a healthy node of each kind looks like, read from YAML files: the packaged
ones (checks/profiles/) and an operator's site profiles, in the directory the `profiles_dir`
setting names (FLEETCTL_PROFILES_DIR). Both are validated alike when loaded: the same schema,
every threshold within bounds. A site profile may not take a packaged profile's name.
"""

from __future__ import annotations

import math
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, fields
from dataclasses import field as dataclass_field
from enum import Enum
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Any

from fleetctl.checks.result import Finding
from fleetctl.checks.safe_yaml import YamlRefused, load_file, loads

PROFILES_DIR_ENV = "FLEETCTL_PROFILES_DIR"


class ProfileError(ValueError):
    """A profile file that cannot be used (bad schema, a threshold out of bounds, a site profile
    named like a packaged one, a missing site directory), said in one line."""


class UnknownProfile(ProfileError):
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


class NcclCollective(str, Enum):
    """The nccl-tests collectives a profile may hold a single-node busbw floor for, beside
    all-reduce's own (nccl_allreduce_busbw_gbps)."""

    ALL_GATHER = "all_gather"
    REDUCE_SCATTER = "reduce_scatter"
    ALLTOALL = "alltoall"
    SENDRECV = "sendrecv"


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
    # The host (checks/host.py). Memory the kernel reports (MemTotal), a little under what is
    # installed; the CPUs that must be online; the fill of every real filesystem and of its
    # inodes; the clock's offset from its NTP source; the PCIe correctable errors (AER) and
    # the memory corrected errors (EDAC) a node may show since boot.
    host_memory_gib: Floor
    host_cpu_count: int
    filesystem_use_percent: Ceiling
    inode_use_percent: Ceiling
    clock_offset_ms: Ceiling
    pcie_correctable_errors: Ceiling
    memory_corrected_errors: Ceiling
    # Units that must be active (systemctl), mounts that must be there and writable, and the
    # fleet's baseline: the driver versions and kernel releases a node may run ([]: any one,
    # so long as the loaded driver and the userspace tools agree).
    required_services: tuple[str, ...]
    required_mounts: tuple[str, ...]
    driver_versions: tuple[str, ...]
    kernel_releases: tuple[str, ...]
    # GPUs in one multi-node NVLink domain (a GB200 NVL72 rack: 72), whose fabric state
    # (nvidia-smi -q's Fabric section) is judged; 0: the node's NVLink is its own (HGX).
    nvlink_domain_gpus: int
    # Optional. Single-node out-of-place busbw floors of the other collectives, at the largest
    # size (>= 1 GiB); a collective without one is run and checked for wrong values, its
    # bandwidth not judged. No packaged profile has a public figure to set them from: a site
    # profile holds the floors it measured.
    nccl_collective_busbw_gbps: Mapping[NcclCollective, Floor] = dataclass_field(default_factory=dict)

    def matches_gpu_name(self, product_name: str) -> bool:
        return any(p.lower() in product_name.lower() for p in self.gpu_name_patterns)


# Every number a profile holds, with the range a real node's figure can be in: a profile
# with a threshold outside it (a typo, a unit mix-up: 400 Gb/s written as 400000) is refused
# at load, never used. Ranges: (lowest, highest, unit).
_BOUNDS: dict[str, tuple[float, float, str]] = {
    "gpu_count": (1, 16, "GPUs"),  # per node: 8 on HGX, 4 on a GB200 compute tray
    "nccl_allreduce_busbw_gbps": (0, 5000, "GB/s"),
    "nccl_multinode_busbw_gbps": (0, 5000, "GB/s"),
    "hpl_gflops_per_gpu": (0, 1_000_000, "GFLOPS"),
    "hbm_bandwidth_gbps": (0, 50_000, "GB/s"),
    "pcie_bandwidth_gbps": (0, 512, "GB/s"),
    "ib_rate_gbps": (0, 1600, "Gb/s"),
    "ib_port_count": (0, 32, "ports"),
    "ib_write_bw_gbps": (0, 1600, "Gb/s"),
    "gpu_temperature_c": (0, 150, "C"),
    "memory_temperature_c": (0, 150, "C"),
    "ecc_corrected_volatile": (0, 1e12, "errors"),
    "remap_histogram_low_fail": (0, 4096, "banks"),
    "roce_port_count": (0, 32, "ports"),
    "roce_rate_gbps": (0, 1600, "Gb/s"),
    "host_memory_gib": (0, 65536, "GiB"),
    "host_cpu_count": (0, 4096, "CPUs"),  # 0: no count required, only none offline
    "filesystem_use_percent": (0, 100, "%"),
    "inode_use_percent": (0, 100, "%"),
    "clock_offset_ms": (0, 600_000, "ms"),
    "pcie_correctable_errors": (0, 1e12, "errors"),
    "memory_corrected_errors": (0, 1e12, "errors"),
    "nvlink_domain_gpus": (0, 576, "GPUs"),  # NVLink 5 domains reach 576 GPUs (NVIDIA's GB200 figures)
}
# The lists a profile holds, each entry matching what it names (a systemd unit, an absolute
# path, a version string), 32 entries at most.
_LISTS: dict[str, re.Pattern[str]] = {
    "required_services": re.compile(r"[A-Za-z0-9][A-Za-z0-9@._-]{0,99}"),
    "required_mounts": re.compile(r"/[A-Za-z0-9._/-]{0,199}"),
    "driver_versions": re.compile(r"[0-9][0-9A-Za-z.+_-]{0,39}"),
    "kernel_releases": re.compile(r"[0-9][0-9A-Za-z.+_~-]{0,99}"),
}
_NAME = re.compile(r"[a-z0-9][a-z0-9._-]{0,63}")
_FIELD_TYPES = {f.name: f.type for f in fields(GpuProfile)}
_OPTIONAL = ("nccl_collective_busbw_gbps",)


def _number(value: Any, field: str, integral: bool) -> float:
    lo, hi, unit = _BOUNDS[field]
    if isinstance(value, bool) or not isinstance(value, (int, float)) or (integral and not isinstance(value, int)):
        raise ProfileError(
            f"{field}: expected {'a whole number' if integral else 'a number'}, found {str(value)[:30]!r}"
        )
    if not math.isfinite(value) or not lo <= value <= hi:
        raise ProfileError(f"{field}: {value:g} is outside {lo:g}..{hi:g} {unit}")
    return value


def _threshold(value: Any, field: str) -> Floor | Ceiling:
    kind = Floor if _FIELD_TYPES[field] == "Floor" else Ceiling
    if not isinstance(value, dict) or set(value) != {"warn", "fail"}:
        raise ProfileError(f"{field}: expected {{warn: N, fail: N}}")
    warn, fail = (_number(value[k], field, False) for k in ("warn", "fail"))
    # A floor warns before it fails (warn >= fail); a ceiling too (warn <= fail).
    if (kind is Floor and warn < fail) or (kind is Ceiling and warn > fail):
        raise ProfileError(
            f"{field}: warn {warn:g} must be {'at or above' if kind is Floor else 'at or below'} fail {fail:g}"
        )
    return kind(warn, fail)


def _collective_floors(raw: Any) -> dict[NcclCollective, Floor]:
    field_name = "nccl_collective_busbw_gbps"
    if not isinstance(raw, dict):
        raise ProfileError(f"{field_name}: expected a mapping of collective to {{warn: N, fail: N}}")
    known = [c.value for c in NcclCollective]
    if unknown := sorted(str(k) for k in raw if k not in known):
        raise ProfileError(f"{field_name}: unknown collective {unknown[0][:40]!r} (known: {', '.join(known)})")
    floors: dict[NcclCollective, Floor] = {}
    for collective, value in raw.items():
        try:
            floor = _threshold(value, "nccl_allreduce_busbw_gbps")  # the same kind and bounds as all-reduce's
        except ProfileError as exc:
            raise ProfileError(f"{field_name}.{collective}: {str(exc).partition(': ')[2]}") from None
        floors[NcclCollective(collective)] = Floor(floor.warn, floor.fail)
    return floors


def parse_profile(raw: Any, name: str) -> GpuProfile:
    """One profile document, validated: exactly the schema's fields, every number in bounds,
    named as its file. ProfileError says what is wrong in one line."""
    if not isinstance(raw, dict):
        raise ProfileError("expected a mapping of the profile's fields")
    if unknown := sorted(str(k) for k in raw if k not in _FIELD_TYPES):
        raise ProfileError(f"unknown field {unknown[0][:40]!r}")
    if missing := [f for f in _FIELD_TYPES if f not in raw and f not in _OPTIONAL]:
        raise ProfileError(f"missing field {missing[0]!r}")
    if raw["name"] != name:
        raise ProfileError(f"the file {name}.yaml names itself {str(raw['name'])[:40]!r}")
    if not isinstance(raw["description"], str) or len(raw["description"]) > 200:
        raise ProfileError("description: expected text of 200 characters at most")
    patterns = raw["gpu_name_patterns"]
    if (
        not isinstance(patterns, list)
        or not 1 <= len(patterns) <= 16
        or not all(isinstance(p, str) and 0 < len(p.strip()) <= 64 for p in patterns)
    ):
        raise ProfileError("gpu_name_patterns: expected 1 to 16 non-empty names of 64 characters at most")
    values: dict[str, Any] = {
        "name": name,
        "description": raw["description"],
        "gpu_name_patterns": tuple(patterns),
        "nccl_collective_busbw_gbps": _collective_floors(raw.get("nccl_collective_busbw_gbps", {})),
    }
    for field, pattern in _LISTS.items():
        entries = raw[field]
        if (
            not isinstance(entries, list)
            or len(entries) > 32
            or not all(isinstance(e, str) and pattern.fullmatch(e) for e in entries)
        ):
            raise ProfileError(f"{field}: expected a list of at most 32 entries, each like {pattern.pattern[:30]!r}")
        values[field] = tuple(entries)
    for field, kind in _FIELD_TYPES.items():
        if field in values:
            continue
        if kind in ("Floor", "Ceiling"):
            values[field] = _threshold(raw[field], field)
        else:
            values[field] = _number(raw[field], field, kind == "int")
    return GpuProfile(**values)


@cache
def _packaged_names() -> tuple[str, ...]:
    # The installed package's files: listed once a process (every check of every node asks).
    folder = resources.files("fleetctl.checks") / "profiles"
    return tuple(sorted(p.name[: -len(".yaml")] for p in folder.iterdir() if p.name.endswith(".yaml")))


def site_profiles_dir(site_dir: str | Path | None = None) -> Path | None:
    """The directory of site profiles: the one given, else FLEETCTL_PROFILES_DIR's, else none."""
    chosen = site_dir or os.environ.get(PROFILES_DIR_ENV) or None
    return Path(chosen).expanduser() if chosen else None


def _site_files(site_dir: str | Path | None) -> dict[str, Path]:
    directory = site_profiles_dir(site_dir)
    if directory is None:
        return {}
    if not directory.is_dir():
        raise ProfileError(f"profiles directory {directory} does not exist")
    files = {p.name[: -len(".yaml")]: p for p in sorted(directory.glob("*.yaml"))}
    packaged = set(_packaged_names())
    for name, path in files.items():
        if name in packaged:
            raise ProfileError(f"site profile {path} has the name of a packaged profile: give it a name of its own")
        if not _NAME.fullmatch(name):
            raise ProfileError(f"site profile {path}: a profile name is lower-case letters, digits, '.', '_' or '-'")
    return files


def profile_names(site_dir: str | Path | None = None) -> list[str]:
    """Every profile a node can name: the packaged ones and the site's."""
    return sorted([*_packaged_names(), *_site_files(site_dir)])


def site_profiles(site_dir: str | Path | None = None) -> dict[str, GpuProfile]:
    """Every site profile, each loaded and validated: the first that fails is ProfileError
    naming its file. For what takes the directory whole (the worker's start, `node import`):
    a broken file is found when it is put there, not at a node's check hours later."""
    return {name: load_profile(name, site_dir) for name in _site_files(site_dir)}


def profile_source(name: str, site_dir: str | Path | None = None) -> str:
    """Where a profile comes from: "packaged", or its site file."""
    site = _site_files(site_dir)
    return str(site[name]) if name in site else "packaged"


def load_profile(name: str, site_dir: str | Path | None = None) -> GpuProfile:
    site = _site_files(site_dir)
    if name in site:
        path = site[name]
        try:
            return _site_profile(str(path), path.stat().st_mtime_ns, name)
        except OSError as exc:
            raise ProfileError(f"site profile {path}: cannot read ({exc.strerror})") from None
    if name not in _packaged_names():
        raise UnknownProfile(f"unknown GPU profile {name!r}; known profiles: {', '.join(profile_names(site_dir))}")
    return _packaged_profile(name)


@cache
def _packaged_profile(name: str) -> GpuProfile:
    text = (resources.files("fleetctl.checks") / "profiles" / f"{name}.yaml").read_text()
    try:
        return parse_profile(loads(text, f"{name}.yaml"), name)
    except (ProfileError, YamlRefused) as exc:
        raise ProfileError(f"packaged profile {name}.yaml: {exc}") from None


@cache
def _site_profile(path: str, mtime_ns: int, name: str) -> GpuProfile:
    """A site profile, read again whenever its file changes (the modification time is the key)."""
    del mtime_ns
    try:
        profile = parse_profile(load_file(path), name)
    except YamlRefused as exc:  # says the path itself
        raise ProfileError(f"site profile {exc}") from None
    except ProfileError as exc:
        raise ProfileError(f"site profile {path}: {exc}") from None
    if said := fails_no_node(profile):
        raise ProfileError(f"site profile {path}: {said}")
    return profile


def fails_no_node(profile: GpuProfile) -> str | None:
    """What in `profile` would let every node pass a check it is there to hold them to, or
    None: a floor failing at 0 or below (no figure is below it), a ceiling failing at the
    highest figure its bounds allow (none is above it: a disk 100% full passes 100), InfiniBand
    or RoCE rails required at a rate of 0 (any rate is enough). A site's override is an
    operator's edit of a copied profile; a zero left where a number was meant would pass a
    sick fleet silently. Zero counts keep their meaning (ib_port_count 0: no InfiniBand)."""
    for field, kind in _FIELD_TYPES.items():
        threshold = getattr(profile, field)
        if kind == "Floor" and threshold.fail <= 0:
            return f"{field}: a floor failing at {threshold.fail:g} fails no node; give the figure a node must reach"
        if kind == "Ceiling" and threshold.fail >= _BOUNDS[field][1]:
            return (
                f"{field}: a ceiling failing above {threshold.fail:g} {_BOUNDS[field][2]} fails no node; "
                "give the most a node may show"
            )
    for rails, rate in (("ib_port_count", "ib_rate_gbps"), ("roce_port_count", "roce_rate_gbps")):
        if getattr(profile, rails) > 0 and getattr(profile, rate) <= 0:
            return (
                f"{rate}: {rails} {getattr(profile, rails)} at a rate of 0 Gb/s passes any rate; give the rails' rate"
            )
    return None
