"""`flint query`, `mlxfwmanager --query` and `nvfwupd show_version` (read by checks.firmware)."""

from __future__ import annotations

import json

from fleetctl.sim.node import HcaState, NodeState, ToolOutput
from fleetctl.sim.render._layout import aligned_pairs


def render_flint_query(node: NodeState, hca: HcaState) -> ToolOutput:
    """`flint -d DEV query` for one ConnectX adapter."""
    model = node.profile.hca
    return ToolOutput(
        "\n".join(
            aligned_pairs(
                [
                    ("Image type", "FS4"),
                    ("FW Version", hca.firmware),
                    ("FW Release Date", "3.10.2024"),
                    ("Product Version", hca.firmware),
                    ("Rom Info", f"type=UEFI version={model.uefi_version} cpu=AMD64,AARCH64"),
                    ("", f"type=PXE version={model.pxe_version} cpu=AMD64"),
                    ("Description", "UID                GuidsNumber"),
                    ("Base GUID", f"{hca.guid:016x}        16"),
                    ("Base MAC", f"{hca.mac:012x}        16"),
                    ("Image VSD", "N/A"),
                    ("Device VSD", "N/A"),
                    ("PSID", model.psid),
                    ("Security Attributes", "secure-fw"),
                ],
                key_width=23,
            )
        )
        + "\n"
    )


def render_mlxfwmanager(node: NodeState) -> ToolOutput:
    """`mlxfwmanager --query` (and `mlxup --query`): every ConnectX adapter's firmware."""
    model = node.profile.hca
    lines = ["Querying Mellanox devices firmware ...", ""]
    adapters = [h for h in node.hcas if h.ca_type == model.ca_type]
    for number, hca in enumerate(adapters, start=1):
        lines += [f"Device #{number}:", "----------", ""]
        lines += aligned_pairs(
            [
                ("Device Type", model.device_type),
                ("Part Number", model.part_number),
                ("Description", model.description),
                ("PSID", model.psid),
                ("PCI Device Name", f"/dev/mst/mt{model.ca_type[2:]}_pciconf{number - 1}"),
                ("Base GUID", f"{hca.guid:016x}"),
                ("Versions", "Current        Available     "),
            ],
            key_width=18,
            indent="  ",
        )
        lines += [
            f"     {name:<15}{version:<15}N/A           "
            for name, version in (("FW", hca.firmware), ("PXE", model.pxe_version), ("UEFI", model.uefi_version))
        ]
        lines += ["", *aligned_pairs([("Status", "No matching image found")], key_width=18, indent="  "), ""]
    return ToolOutput("\n".join(lines) + "\n")


def render_mlxfwmanager_update(node: NodeState) -> ToolOutput:
    """`mlxfwmanager -u -y -i IMAGE`: burns the profile's firmware into every ConnectX adapter
    (the simulator's image is always the profile's release)."""
    model = node.profile.hca
    adapters = [h for h in node.hcas if h.ca_type == model.ca_type]
    behind = [number for number, hca in enumerate(adapters, start=1) if hca.firmware != model.firmware]
    lines = ["Querying Mellanox devices firmware ...", ""]
    if not behind:
        lines += ["All devices are up to date", ""]
        return ToolOutput("\n".join(lines) + "\n")
    lines += [f"Found {len(behind)} device(s) requiring firmware update...", ""]
    lines += [f"Device #{number}: Updating FW ...     Done" for number in behind]
    lines += ["", "Restart needed for updates to take effect.", ""]
    return ToolOutput("\n".join(lines) + "\n")


def firmware_inventory(node: NodeState, packaged: bool = False) -> list[tuple[str, str]]:
    """(component, version) as the BMC's Redfish FirmwareInventory names them: what runs on
    the node, or with `packaged` what the profile's firmware package carries."""
    p = node.profile
    cx = [p.hca.firmware if packaged else h.firmware for h in node.hcas if h.ca_type == p.hca.ca_type]
    items = [(f"CX7_{i}", version) for i, version in enumerate(cx)]
    items += [(f"HGX_FW_GPU_SXM_{g.index + 1}", p.vbios_version if packaged else g.vbios_version) for g in node.gpus]
    items += [(f"HGX_InfoROM_GPU_SXM_{g.index + 1}", p.inforom_image) for g in node.gpus]
    items += [(f"HGX_FW_NVSwitch_{i}", p.nvswitch_firmware) for i in range(p.nvswitch_count)]
    return sorted(items)


def render_nvfwupd_show_version(node: NodeState, with_package: bool, as_json: bool) -> ToolOutput:
    """`nvfwupd show_version [-p PKG] [-j]`; the package, when given, is the profile's baseline."""
    packaged = dict(firmware_inventory(node, packaged=True)) if with_package else {}
    package_names = ["nvfw_HGX_sim_baseline"] if with_package else []
    rows = []
    for component, running in firmware_inventory(node):
        version = packaged.get(component, "N/A")
        rows.append((component, running, version, "Yes" if version == running else "No"))
    if as_json:
        document = {
            "Connection Status": "Successful",
            "System Model": f"HGX {node.profile.gpu_name.removeprefix('NVIDIA ')} 8-GPU",
            "Part number": "965-24387-0002-001",
            "Serial number": node.gpus[0].serial,
            "Packages": package_names,
            "Firmware Devices": [
                {"AP Name": c, "Sys Version": r, "Pkg Version": pk, "Up-To-Date": up} for c, r, pk, up in rows
            ],
            "Error Code": 0,
        }
        return ToolOutput(json.dumps(document, indent=4) + "\n")
    lines = [
        f"System Model: HGX {node.profile.gpu_name.removeprefix('NVIDIA ')} 8-GPU",
        "Part number: 965-24387-0002-001",
        f"Serial number: {node.gpus[0].serial}",
        f"Packages: {package_names}",
        "Connection Status: Successful",
        "",
        "Firmware Devices:",
    ]
    table = [
        ("AP Name", "Sys Version", "Pkg Version", "Up-To-Date"),
        ("-------", "-----------", "-----------", "----------"),
    ]
    lines += [f"{a:<41}{b:<31}{c:<31}{d:<10}" for a, b, c, d in table + rows]
    lines += ["-" * 120, "Error Code: 0"]
    return ToolOutput("\n".join(lines) + "\n")
