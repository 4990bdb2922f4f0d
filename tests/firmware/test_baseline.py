"""Baselines, drift, roll-out plans and SSH update commands (pure)."""

from __future__ import annotations

from pathlib import Path

import pytest

from fleetctl.remediation.firmware import (
    Baseline,
    BaselineError,
    batch_size,
    drift,
    load_baseline,
    node_drift,
    parse_baseline,
    plan_batches,
    update_argv,
    updates_for,
)
from fleetctl.remediation.sandbox import TemplateRefused

FIXTURE = Path(__file__).parents[1] / "fixtures" / "firmware" / "h100-baseline.yaml"
HEALTHY = {
    **{f"GPU {i} VBIOS": "96.00.99.00.01" for i in range(8)},
    **{f"ConnectX7 /dev/mst/mt4129_pciconf{i}": "28.41.1000" for i in range(8)},
}


def test_fixture_loads_and_round_trips() -> None:
    baseline = load_baseline(FIXTURE, {"h100-sxm", "h200-sxm"})
    assert Baseline.from_dict(baseline.to_dict()) == baseline
    vbios, nic = baseline.profiles["h100-sxm"]
    assert (vbios.update.method, nic.update.method) == ("redfish", "ssh")


def test_drift() -> None:
    baseline = load_baseline(FIXTURE)
    assert node_drift(baseline, "n", "h100-sxm", HEALTHY).status == "ok"
    assert node_drift(baseline, "n", "h100-sxm", None).status == "unknown"
    assert node_drift(baseline, "n", "b200", HEALTHY).status == "no_baseline"
    old = {**HEALTHY, "GPU 3 VBIOS": "96.00.74.00.01"}
    (d,) = node_drift(baseline, "n", "h100-sxm", old).drifts
    assert (d.component, d.actual, d.expected) == ("GPU 3 VBIOS", "96.00.74.00.01", "96.00.99.00.01")
    no_nic = {k: v for k, v in HEALTHY.items() if "ConnectX" not in k}
    (missing,) = drift(baseline.profiles["h100-sxm"], no_nic)
    assert missing.component is None and missing.pattern == "ConnectX7 *"
    all_old = dict.fromkeys(HEALTHY, "old")
    specs = updates_for(baseline, "h100-sxm", drift(baseline.profiles["h100-sxm"], all_old))
    assert [s.pattern for s in specs] == ["GPU * VBIOS", "ConnectX7 *"]  # one update per entry, not per GPU


def test_ssh_update_quotes_every_value() -> None:
    spec = load_baseline(FIXTURE).profiles["h100-sxm"][1]
    assert update_argv(spec, {"node": "gpu-01"}) == [
        "mlxfwmanager",
        "-u",
        "-y",
        "-i",
        "/opt/firmware/fw-ConnectX7-28.41.1000.bin",
        "--log",
        "gpu-01.log",
    ]
    hostile = update_argv(spec, {"node": "x; rm -rf / #"})
    assert hostile[-1] == "x; rm -rf / #.log"  # one argument; the executor quotes it


@pytest.mark.parametrize(
    "text, message",
    [
        ("name: x", "expected 'name' and a non-empty 'profiles'"),
        (
            "name: x\nprofiles: {h100-sxm: {'GPU *': {version: 1, update: {redfish: {image: 'ftp://x/y'}}}}}",
            "http or https",
        ),
        (
            "name: x\nprofiles: {h100-sxm: {'GPU *': {version: 1, update: {ssh: 'a', redfish: {image: 'http://x'}}}}}",
            "exactly one",
        ),
        (
            "name: x\nprofiles: {h100-sxm: {'GPU *': {version: 1, update: {ssh: \"{{ ''.__class__ }}\"}}}}",
            "not allowed",
        ),
        ("name: x\nprofiles: {nope: {'GPU *': 1}}", "unknown profile 'nope'"),
    ],
)
def test_bad_baselines(text: str, message: str) -> None:
    with pytest.raises((BaselineError, TemplateRefused), match=message):
        parse_baseline(text, "b.yaml", {"h100-sxm"})


@pytest.mark.parametrize(
    "nodes, canary, batch, sizes",
    [
        (20, 1, "5%", [1] * 20),
        (20, 1, "5", [1, 5, 5, 5, 4]),
        (20, 0, "25%", [5, 5, 5, 5]),
        (3, 1, "50%", [1, 2]),
        (0, 1, "5%", []),
    ],
)
def test_plan_batches(nodes: int, canary: int, batch: str, sizes: list[int]) -> None:
    names = [f"n{i:02d}" for i in range(nodes)]
    batches = plan_batches(names, canary, batch)
    assert [len(b) for b in batches] == sizes
    assert [n for b in batches for n in b] == names


@pytest.mark.parametrize("spec", ["0", "-1", "five", "2.5"])
def test_bad_batch(spec: str) -> None:
    with pytest.raises(ValueError):
        batch_size(spec, 10)
