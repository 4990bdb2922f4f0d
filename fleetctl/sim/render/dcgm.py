"""`dcgmi diag -r LEVEL [-j]`: the text table and the JSON document (read by checks.dcgm)."""

from __future__ import annotations

import json
from dataclasses import dataclass, field

from fleetctl.sim.node import REASON_HW_THERMAL, GpuState, NodeState, ToolOutput
from fleetctl.sim.render._layout import box_rows

_DEPLOYMENT_TESTS = (
    "Denylist",
    "NVML Library",
    "CUDA Main Library",
    "Permissions and OS Blocks",
    "Persistence Mode",
    "Environment Variables",
    "Page Retirement/Row Remap",
    "Graphics Processes",
    "Inforom",
)


def _plugin_tests(level: int) -> list[tuple[str, list[str]]]:
    """(category, tests) that `dcgmi diag -r level` runs after the deployment checks."""
    if level < 2:
        return []
    hardware = ["GPU Memory"] + (["Diagnostic"] if level >= 3 else []) + (["Pulse Test"] if level >= 4 else [])
    stress = (
        (["SM Stress"] if level >= 4 else [])
        + (["Targeted Stress", "Targeted Power", "Memory Bandwidth"] if level >= 3 else [])
        + (["Memtest"] if level >= 4 else [])
    )
    return [("Integration", ["PCIe"]), ("Hardware", hardware), ("Stress", stress)]


@dataclass
class _DiagTest:
    name: str
    status: str  # "Pass", "Fail", "Skip", per GPU for plugin tests
    failed_gpus: list[int] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    error_id: int = 0  # a DCGM_FR_* code; parsers go by status and text


def _diag_results(node: NodeState, level: int) -> tuple[list[_DiagTest], list[tuple[str, list[_DiagTest]]]]:
    """Deployment results and plugin results by category, from the node's state."""
    deployment = {name: _DiagTest(name, "Pass") for name in _DEPLOYMENT_TESTS}
    for gpu in node.lost_gpus:
        test = deployment["CUDA Main Library"]
        test.status = "Fail"
        test.error_id = 3
        test.warnings.append(
            f"GPU {gpu.index} Error using CUDA API cuDeviceGetByPCIBusId Check DCGM and system logs for "
            f"errors. Reset GPU. Restart DCGM. Rerun diagnostics. 'unknown error' for GPU {gpu.index}, "
            f"bus ID = {gpu.pci_bus_id}"
        )
    for gpu in node.visible_gpus:
        test = deployment["Page Retirement/Row Remap"]
        if gpu.remap_failure:
            test.warnings.append(f"GPU {gpu.index} had uncorrectable memory errors and row remapping failed.")
        elif gpu.remap_pending:
            test.warnings.append(f"GPU {gpu.index} has uncorrectable memory errors and row remappings are pending")
        elif gpu.ecc_uncorrected_volatile:
            test.warnings.append(
                f"GPU {gpu.index} has {gpu.ecc_uncorrected_volatile} uncorrectable ECC errors (volatile DBE)."
            )
        if test.warnings:
            test.status, test.error_id = "Fail", 96
    deployment_failed = any(t.status == "Fail" for t in deployment.values())

    gpu_ids = [g.index for g in node.gpus]
    plugins: list[tuple[str, list[_DiagTest]]] = []
    for category, names in _plugin_tests(level):
        tests = []
        for name in names:
            test = _DiagTest(name, "Skip" if deployment_failed else "Pass")
            if not deployment_failed:
                _judge_plugin(node, test, gpu_ids)
            tests.append(test)
        plugins.append((category, tests))
    return list(deployment.values()), plugins


def _judge_plugin(node: NodeState, test: _DiagTest, gpu_ids: list[int]) -> None:
    """What a stress plugin finds on this node's GPUs."""
    if test.name in ("Targeted Stress", "Targeted Power", "SM Stress"):
        for gpu in node.gpus:
            if gpu.event_reasons & REASON_HW_THERMAL:
                test.failed_gpus.append(gpu.index)
                test.warnings.append(
                    f"GPU {gpu.index} Thermal violations totaling 13.3 seconds started at 9.7 seconds into "
                    f"the test for GPU {gpu.index} Verify that the cooling on this machine is functional, "
                    "including external, thermal material interface, fans, and any other components."
                )
                test.error_id = 35
    if test.name in ("GPU Memory", "Diagnostic") and node.transient_failure:
        victim = gpu_ids[len(gpu_ids) // 2]
        test.failed_gpus.append(victim)
        test.warnings.append(
            f"GPU {victim} Error using CUDA API cudaMemcpy Check DCGM and system logs for errors. Reset GPU. "
            "Restart DCGM. Rerun diagnostics. 'an illegal memory access was encountered'"
        )
        test.error_id = 3
    if test.failed_gpus:
        test.status = "Fail"


_DIAG_KEY_WIDTH = 25
_DIAG_VALUE_WIDTH = 46


def _diag_row(key: str, value: str) -> str:
    return f"| {key.ljust(_DIAG_KEY_WIDTH)} | {value.ljust(_DIAG_VALUE_WIDTH)} |"


def _diag_cell(key: str, text: str) -> list[str]:
    pieces = box_rows(text, _DIAG_VALUE_WIDTH)
    return [_diag_row(key, pieces[0])] + [_diag_row("", piece) for piece in pieces[1:]]


def _diag_section(title: str, edge: str) -> str:
    return f"{edge}{('-----  ' + title + '  ').ljust(_DIAG_KEY_WIDTH + 2, '-')}+{'-' * (_DIAG_VALUE_WIDTH + 2)}{edge}"


def _plugin_summary(test: _DiagTest, gpu_ids: list[int]) -> list[str]:
    """ "Pass - All", or "Pass - GPUs: 1, 2" and "Fail - GPU: 0" lines."""
    if not test.failed_gpus:
        return [f"{test.status} - All"]
    passed = [i for i in gpu_ids if i not in test.failed_gpus]
    lines = []
    if passed:
        lines.append(("Pass - GPU: " if len(passed) == 1 else "Pass - GPUs: ") + ", ".join(map(str, passed)))
    lines.append(
        ("Fail - GPU: " if len(test.failed_gpus) == 1 else "Fail - GPUs: ") + ", ".join(map(str, test.failed_gpus))
    )
    return lines


def render_dcgmi_diag(node: NodeState, level: int, as_json: bool) -> ToolOutput:
    """`dcgmi diag -r level [-j]`, in DCGM 3.3's table or JSON layout."""
    deployment, plugins = _diag_results(node, level)
    failed = any(t.status == "Fail" for t in deployment) or any(
        t.status == "Fail" for _, tests in plugins for t in tests
    )
    gpu_ids = [g.index for g in node.gpus]
    device_ids = [f"{node.profile.pci_device_id:04x}"] * len(gpu_ids)
    exit_status = 226 if failed else 0  # dcgmi exits non-zero when a test fails
    if as_json:
        return ToolOutput(_diag_json(node, deployment, plugins, gpu_ids, device_ids), exit_status=exit_status)

    border = f"+{'-' * (_DIAG_KEY_WIDTH + 2)}+{'-' * (_DIAG_VALUE_WIDTH + 2)}+"
    lines = [
        "Successfully ran diagnostic for group.",
        border,
        _diag_row("Diagnostic", "Result"),
        border.replace("-", "="),
        _diag_section("Metadata", "|"),
        _diag_row("DCGM Version", node.profile.dcgm_version),
        _diag_row("Driver Version Detected", node.profile.driver_version),
        *_diag_cell("GPU Device IDs Detected", ",".join(device_ids)),
        _diag_section("Deployment", "|"),
    ]
    for test in deployment:
        lines.append(_diag_row(test.name, test.status))
        lines.extend(row for warning in test.warnings for row in _diag_cell("Warning", warning))
    for category, tests in plugins:
        lines.append(_diag_section(category, "+"))
        for test in tests:
            summary = _plugin_summary(test, gpu_ids)
            lines.append(_diag_row(test.name, summary[0]))
            lines.extend(_diag_row("", more) for more in summary[1:])
            lines.extend(row for warning in test.warnings for row in _diag_cell("Warning", warning))
    lines.append(border)
    return ToolOutput("\n".join(lines) + "\n", exit_status=exit_status)


def _diag_json(
    node: NodeState,
    deployment: list[_DiagTest],
    plugins: list[tuple[str, list[_DiagTest]]],
    gpu_ids: list[int],
    device_ids: list[str],
) -> str:
    def warnings(test: _DiagTest, gpu: int | None) -> list[dict[str, object]]:
        texts = test.warnings if gpu is None else [w for w in test.warnings if w.startswith(f"GPU {gpu} ")]
        return [
            {"error_category": 1, "error_id": test.error_id, "error_severity": 2, "warning": text} for text in texts
        ]

    categories: list[dict[str, object]] = [
        {
            "category": "Deployment",
            "tests": [
                {
                    "name": test.name,
                    "results": [
                        {
                            "gpu_ids": ",".join(map(str, gpu_ids)),
                            "status": test.status.upper(),
                            **({"warnings": warnings(test, None)} if test.warnings else {}),
                        }
                    ],
                }
                for test in deployment
            ],
        }
    ]
    for category, tests in plugins:
        entries = []
        for test in tests:
            results = []
            for gpu in gpu_ids:
                # A test that failed on some GPUs passed on the others.
                status = "FAIL" if gpu in test.failed_gpus else "PASS" if test.status == "Fail" else test.status.upper()
                result: dict[str, object] = {"gpu_ids": gpu, "status": status}
                if gpu in test.failed_gpus:
                    result["warnings"] = warnings(test, gpu)
                results.append(result)
            entries.append({"name": test.name, "results": results})
        categories.append({"category": category, "tests": entries})
    document = {
        "DCGM GPU Diagnostic": {
            "test_categories": categories,
            "version": node.profile.dcgm_version,
            "Driver Version Detected": node.profile.driver_version,
            "GPU Device IDs": device_ids,
        }
    }
    return json.dumps(document, indent="\t", separators=(",", " : ")) + "\n"


# `dcgmi health -c`: dcgmi/Health.cpp's DcgmiOutputTree(28, 60), read by checks.dcgm_health.
_HEALTH_KEY_WIDTH = 26
_HEALTH_VALUE_WIDTH = 56
_HEALTH_MESSAGE_WIDTH = 54


def _health_row(key: str, value: str) -> str:
    return f"| {key.ljust(_HEALTH_KEY_WIDTH)}| {value.ljust(_HEALTH_VALUE_WIDTH)} |"


def _memory_incident(gpu: GpuState) -> tuple[str, str] | None:
    """What DCGM's memory watch reports for a GPU (dcgm_errors.h's DCGM_FR_* messages)."""
    if gpu.remap_failure:
        return "Failure", f"GPU {gpu.index} had uncorrectable memory errors and row remapping failed."
    if gpu.remap_pending:
        return "Failure", f"GPU {gpu.index} has uncorrectable memory errors and row remappings are pending"
    if gpu.ecc_uncorrected_volatile:
        return (
            "Failure",
            f"Detected {gpu.ecc_uncorrected_volatile} volatile double-bit ECC error(s) in GPU {gpu.index}.",
        )
    return None


def render_dcgmi_health(node: NodeState) -> ToolOutput:
    """`dcgmi health -c` with every watch set: the memory system's incidents per GPU."""
    incidents = [(gpu, found) for gpu in node.visible_gpus if (found := _memory_incident(gpu))]
    border = f"+{'-' * (_HEALTH_KEY_WIDTH + 1)}+{'-' * (_HEALTH_VALUE_WIDTH + 2)}+"
    lines = [
        border,
        f"| {'Health Monitor Report'.ljust(_HEALTH_KEY_WIDTH + _HEALTH_VALUE_WIDTH + 2)} |",
        border.replace("-", "="),
        _health_row("Overall Health", "Failure" if incidents else "Healthy"),
    ]
    if incidents:
        lines.append(_health_row("GPU", ""))
    for gpu, (health, message) in incidents:
        lines += [
            _health_row(f"-> {gpu.index}", health),
            _health_row("   -> Errors", ""),
            _health_row("      -> Memory system", health),
            *(_health_row("", piece) for piece in _wrap(message, _HEALTH_MESSAGE_WIDTH)),
        ]
    lines.append(border)
    return ToolOutput("\n".join(lines) + "\n", exit_status=0)


def _wrap(text: str, width: int) -> list[str]:
    """Words over rows of `width`, as dcgmi's output tree wraps a message."""
    rows: list[str] = []
    for word in text.split():
        if rows and len(rows[-1]) + 1 + len(word) <= width:
            rows[-1] += " " + word
        else:
            rows.append(word)
    return rows
