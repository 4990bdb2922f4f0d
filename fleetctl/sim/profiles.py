"""The healthy values a simulated node renders, per GPU profile, read from the YAML files in
fleetctl/sim/data (shipped as package data).

`data/profiles/<name>.yaml` holds one profile's numbers; its `hca` names an adapter in
`data/hca_models.yaml` and its `gpu_bus_layouts` a list in `data/gpu_bus_layouts.yaml`.
These are what a node prints when healthy, not thresholds: what a check accepts is in
checks/profiles. Loading is strict (every field present, no unknown key, each of its
declared type) because one float read as an int already changes what nvidia-smi prints.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from functools import cache
from importlib import resources
from typing import Any

import yaml


@dataclass(frozen=True)
class HcaModel:
    """A ConnectX adapter model, as ibstat and the firmware tools name it."""

    ca_type: str  # ibstat "CA type": MT4129 = ConnectX-7
    device_type: str  # mlxfwmanager "Device Type"
    part_number: str
    description: str
    psid: str
    firmware: str
    drifted_firmware: str  # an older release, what `firmware-drift` shows
    pxe_version: str
    uefi_version: str


@dataclass(frozen=True)
class SimProfile:
    """Healthy rendered values of one GPU platform (not thresholds: see checks.profiles)."""

    name: str
    gpu_name: str
    gpu_count: int
    architecture: str
    cpu_architecture: str  # uname -m of the host CPUs: x86_64, or aarch64 (Grace)
    host_cpus: int  # CPUs the host's lscpu lists, every one online
    pci_device_id: int  # nvidia-smi prints it as 0x<device><vendor>: 0x233010DE
    pci_subsystem_id: int
    memory_mib: int
    memory_reserved_mib: int
    board_part_number: str
    gpu_part_number: str
    inforom_image: str
    driver_version: str
    cuda_version: str
    dcgm_version: str
    vbios_version: str
    drifted_vbios_version: str
    power_limit_w: float
    min_power_limit_w: float
    max_sm_clock_mhz: int
    memory_clock_mhz: int
    pcie_gen: int
    remap_banks: int
    compute_cap: str
    nvswitch_count: int
    nvswitch_firmware: str
    allreduce_busbw_gbps: float  # single-node all-reduce bus bandwidth at large sizes
    allreduce_latency_us: float
    multinode_allreduce_busbw_gbps: float  # two-node all-reduce bus bandwidth over healthy rails
    hpl_gflops_per_gpu: float
    ib_rate_gbps: int
    ib_write_bw_efficiency: float  # ib_write_bw average as a fraction of the link rate
    hca: HcaModel
    # PCI bus numbers of the GPUs on the server models this platform ships in.
    gpu_bus_layouts: tuple[tuple[int, ...], ...]


def _typed(cls: type, where: str, raw: Any, **resolved: Any) -> Any:
    """cls(**raw) with every scalar checked against the field's declared type."""
    if not isinstance(raw, dict):
        raise ValueError(f"{where}: expected a mapping, not {type(raw).__name__}")
    names = {f.name: f.type for f in fields(cls)}
    given = set(raw) | set(resolved)
    if given != set(names):
        missing, unknown = sorted(set(names) - given), sorted(given - set(names))
        raise ValueError(f"{where}: missing {missing or 'nothing'}, unknown {unknown or 'nothing'}")
    values = dict(resolved)
    for key, value in raw.items():
        kind = names[key]
        if kind == "float" and isinstance(value, (int, float)) and not isinstance(value, bool):
            values[key] = float(value)
        elif kind in ("int", "str") and type(value).__name__ == kind:
            values[key] = value
        else:
            raise ValueError(f"{where}: {key} must be {kind}, not {value!r}")
    return cls(**values)


def _data(*path: str) -> Any:
    return yaml.safe_load(resources.files("fleetctl.sim").joinpath("data", *path).read_text())


@cache
def _load() -> dict[str, SimProfile]:
    models = {key: _typed(HcaModel, f"hca_models.yaml: {key}", raw) for key, raw in _data("hca_models.yaml").items()}
    layouts = {key: tuple(tuple(buses) for buses in raw) for key, raw in _data("gpu_bus_layouts.yaml").items()}
    profiles: dict[str, SimProfile] = {}
    folder = resources.files("fleetctl.sim").joinpath("data", "profiles")
    for file in sorted(folder.iterdir(), key=lambda f: f.name):
        if not file.name.endswith(".yaml"):
            continue
        name = file.name.removesuffix(".yaml")
        raw = dict(yaml.safe_load(file.read_text()))
        hca, layout = raw.pop("hca", None), raw.pop("gpu_bus_layouts", None)
        if hca not in models or layout not in layouts:
            raise ValueError(f"{file.name}: hca {hca!r} or gpu_bus_layouts {layout!r} is not defined")
        profiles[name] = _typed(SimProfile, file.name, raw, name=name, hca=models[hca], gpu_bus_layouts=layouts[layout])
    return profiles


def sim_profiles() -> dict[str, SimProfile]:
    """Every simulated profile by name."""
    return dict(_load())


def sim_profile(name: str) -> SimProfile:
    profiles = _load()
    if name not in profiles:
        raise ValueError(f"unknown simulated GPU profile {name!r}; known: {', '.join(profiles)}")
    return profiles[name]
