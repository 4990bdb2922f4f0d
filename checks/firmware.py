"""Firmware inventories, in whichever form the node or its BMC gives them:

- `nvidia-smi --query-gpu=index,pci.bus_id,vbios_version --format=csv` (GPU VBIOS)
- `flint -d <dev> query` and `mlxup` / `mlxfwmanager --query` (ConnectX firmware)
- Redfish `UpdateService/FirmwareInventory` JSON (members, or an expanded collection), or a
  BMC's `Managers/<id>` resources where it serves no inventory (component `BMC <id>`)
- `nvfwupd show_version` as its text table or `-j` JSON

Judgement is about consistency, not a baseline (the roll-out workflow owns the baseline):
components of one kind on one node must run one version, and tools' own verdicts
(update required, Redfish health) are passed on.
"""

from __future__ import annotations

import json
import re
from collections import defaultdict
from typing import Any, TypeAlias

from fleetctl.checks._text import UnjudgeableOutput, verdict
from fleetctl.checks.nvidia_smi import parse_nvidia_smi
from fleetctl.checks.profiles import GpuProfile
from fleetctl.checks.result import CheckResult, Finding

# Component name -> version; None where the tool lists a component without one (a GPU
# whose VBIOS nvidia-smi could not read).
Components: TypeAlias = dict[str, str | None]


def parse_firmware(text: str) -> tuple[Components, list[Finding]]:
    """Component name -> version, plus the findings the tool itself states."""
    documents = _json_documents(text)
    if documents:
        return _from_json(documents)
    if "AP Name" in text and "Sys Version" in text:
        return _from_nvfwupd_table(text)
    if re.search(r"^Device #\d+:\s*$", text, re.M):
        return _from_mlxup(text)
    if re.search(r"^FW Version:", text, re.M):
        return _from_flint(text)
    if re.search(r"^\s*\S.*\bvbios_version\b", text, re.M):
        gpus = parse_nvidia_smi(text).gpus
        return {f"GPU {g.index} VBIOS": g.vbios for g in gpus}, []
    raise UnjudgeableOutput("not a firmware inventory (nvidia-smi VBIOS CSV, flint, mlxup, Redfish or nvfwupd)")


def _json_documents(text: str) -> list[dict[str, Any]]:
    """Every JSON object in the text, from the first line that opens one (Redfish dumps are
    often several GETs in a row); a broken one makes the whole output unjudgeable."""
    first = re.search(r"^\s*\{", text, re.M)
    if not first:
        return []
    docs: list[dict[str, Any]] = []
    decoder, at = json.JSONDecoder(), first.start()
    while (start := text.find("{", at)) != -1:
        try:
            doc, at = decoder.raw_decode(text, start)
        except json.JSONDecodeError as exc:
            raise UnjudgeableOutput(f"firmware JSON does not parse: {exc.msg} (line {exc.lineno})") from None
        docs.append(doc)
    return docs


def _from_json(documents: list[dict[str, Any]]) -> tuple[Components, list[Finding]]:
    components: Components = {}
    findings: list[Finding] = []
    for doc in documents:
        if "Firmware Devices" in doc:  # nvfwupd -j
            for device in doc["Firmware Devices"]:
                _nvfwupd_row(
                    device["AP Name"],
                    device["Sys Version"],
                    device["Pkg Version"],
                    device["Up-To-Date"],
                    components,
                    findings,
                )
        for item in [doc] + [m for m in doc.get("Members", []) if "Version" in m]:
            if "Version" in item and "Id" in item:  # a Redfish SoftwareInventory
                _redfish_component(item["Id"], item["Version"], item, components, findings)
        if str(doc.get("@odata.type", "")).startswith("#Manager.") and "FirmwareVersion" in doc:
            _redfish_component(f"BMC {doc.get('Id', '')}".strip(), doc["FirmwareVersion"], doc, components, findings)
    if not components and any("Members" in d for d in documents):
        raise UnjudgeableOutput("Redfish collection lists members only; fetch each member (or use $expand)")
    return components, findings


def _redfish_component(
    name: str, version: str, resource: dict[str, Any], components: Components, findings: list[Finding]
) -> None:
    components[name] = version
    health = (resource.get("Status") or {}).get("Health")
    if health in ("Warning", "Critical"):
        findings.append(Finding(f"Redfish reports health {health}", name, "fail" if health == "Critical" else "warn"))


def _nvfwupd_row(
    name: str, system: str, package: str, up_to_date: str, components: Components, findings: list[Finding]
) -> None:
    components[name] = system
    # nvfwupd also says "No" for a component absent from the package, or (seen on DGX
    # BMCs) for one already at the package's version; only a real difference counts.
    if up_to_date.strip() == "No" and package.strip() not in ("N/A", "", system.strip()):
        findings.append(Finding(f"runs {system}, package has {package}", name, "warn"))


def _from_nvfwupd_table(text: str) -> tuple[Components, list[Finding]]:
    components: Components = {}
    findings: list[Finding] = []
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("AP Name"))
    closed = False
    for line in lines[start + 1 :]:
        if not line.strip() or set(line.strip()) <= {"-", " "}:
            if components:
                closed = True
                break
            continue
        cells = re.split(r"\s{2,}", line.strip())  # CPLD versions contain single spaces
        if len(cells) != 4:
            raise UnjudgeableOutput(f"nvfwupd row has {len(cells)} columns: {line.strip()[:80]!r}")
        name, system, package, up_to_date = cells
        _nvfwupd_row(name, system, package, up_to_date, components, findings)
    if not closed:
        raise UnjudgeableOutput("nvfwupd table not closed by its dashed line: the output was cut short")
    return components, findings


def _from_mlxup(text: str) -> tuple[Components, list[Finding]]:
    components: Components = {}
    findings: list[Finding] = []
    for block in re.split(r"^Device #\d+:\s*$", text, flags=re.M)[1:]:
        name = _field(block, "PCI Device Name") or _field(block, "Base MAC") or f"device {len(components)}"
        fw = re.search(r"^\s+FW\s+(\S+)\s+(\S+)", block, re.M)
        if not fw:
            raise UnjudgeableOutput(f"mlxup block for {name} has no FW version line")
        kind = _field(block, "Device Type") or "ConnectX"
        components[f"{kind} {name}"] = fw[1]
        status = _field(block, "Status")
        if status and status.lower().startswith("update required"):
            findings.append(Finding(f"runs {fw[1]}, {fw[2]} available (update required)", f"{kind} {name}", "warn"))
    return components, findings


def _from_flint(text: str) -> tuple[Components, list[Finding]]:
    psid = _field(text, "PSID") or "ConnectX"
    return {f"ConnectX {psid}": _field(text, "FW Version")}, []


def _field(text: str, name: str) -> str | None:
    m = re.search(rf"^\s*{re.escape(name)}:\s*(.+?)\s*$", text, re.M)
    return m[1] if m else None


# Parts a node has several identical copies of, which must all run one version. Others that
# share a name pattern need not (FW_CPLD_0..3 are different CPLDs).
_UNIFORM_PARTS = re.compile(r"GPU|CX\d|ConnectX|NVSwitch|NIC|InfoROM", re.IGNORECASE)


def _family(component: str) -> str | None:
    """'HGX_FW_GPU_SXM_3' -> 'HGX_FW_GPU_SXM_#', 'GPU 5 VBIOS' -> 'GPU # VBIOS'; None if not uniform."""
    return re.sub(r"\d+", "#", component) if _UNIFORM_PARTS.search(component) else None


def judge_firmware(text: str, profile: GpuProfile | None) -> CheckResult:
    components, findings = parse_firmware(text)
    if not components:
        raise UnjudgeableOutput("firmware inventory lists no components")
    vbios = [name for name in components if name.endswith(" VBIOS")]
    if profile and vbios and len(vbios) < profile.gpu_count:
        findings.append(Finding(f"VBIOS of {len(vbios)} GPUs listed, {profile.name} has {profile.gpu_count}"))
    versions_by_family: dict[str, set[str]] = defaultdict(set)
    for name, version in components.items():
        if not version or version in ("N/A", "[N/A]"):
            findings.append(Finding("version not readable", name, "warn"))
            continue
        if family := _family(name):
            versions_by_family[family].add(version)
    mixed = {family: sorted(v) for family, v in versions_by_family.items() if len(v) > 1}
    findings += [Finding(f"mixed versions on one node: {', '.join(v)}", family, "warn") for family, v in mixed.items()]
    metrics = {"components": components, "component_count": len(components), "mixed_families": sorted(mixed)}
    return verdict(findings, metrics, f"{len(components)} firmware components, versions consistent")
