"""Node names and labels reach shells, scheduler commands and workflow ids: only safe ones pass."""

from __future__ import annotations

import pytest

from fleetctl.executors.base import validate_label, validate_node_name

INJECTIONS = [
    "gpu-01; rm -rf /",
    "gpu-01 && reboot",
    "$(reboot)",
    "${IFS}",
    "`id`",
    "gpu-01\n",
    "gpu-01\nrm -rf /",
    "gpu-01\r",
    "gpu 01",
    "gpu-01|sh",
    "gpu-01>x",
    "'gpu-01'",
    '"gpu-01"',
    "../etc/passwd",
    "-oProxyCommand=sh",
    "gpu-01\x00",
    "",
]


@pytest.mark.parametrize("name", ["gpu-01", "dgx-h100-017.rack4", "n_7", "A" * 63])
def test_valid_node_names_pass(name: str) -> None:
    assert validate_node_name(name) == name


@pytest.mark.parametrize("name", [*INJECTIONS, "A" * 64, ".hidden", "_x", "gpu/01"])
def test_unsafe_node_names_are_refused(name: str) -> None:
    with pytest.raises(ValueError, match="invalid node name"):
        validate_node_name(name)


@pytest.mark.parametrize(
    ("key", "value"),
    [("rack", "r04"), ("fleetctl.io/pool", "training-a"), ("gpu", "h100-sxm"), ("maintenance", ""), ("a", "B.c_d-9")],
)
def test_valid_labels_pass(key: str, value: str) -> None:
    assert validate_label(key, value) == (key, value)


@pytest.mark.parametrize("key", [*INJECTIONS, "x" * 64, "-rack", "rack-", "a/b/c", "pool/"])
def test_unsafe_label_keys_are_refused(key: str) -> None:
    with pytest.raises(ValueError, match="invalid label key"):
        validate_label(key, "v")


@pytest.mark.parametrize("value", [v for v in INJECTIONS if v] + ["x" * 64, "-a", "a-", "a/b"])
def test_unsafe_label_values_are_refused(value: str) -> None:
    with pytest.raises(ValueError, match="invalid label value"):
        validate_label("rack", value)
