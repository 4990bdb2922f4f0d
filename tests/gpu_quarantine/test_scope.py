"""Which faults take one GPU out rather than the node (fleetctl.nodes.gpu_quarantine), as the
site's Xid policy scopes them (checks.xid_policy `scope`)."""

from __future__ import annotations

import pytest

from fleetctl.checks.xid_policy import CATALOG, FaultScope, XidPolicyError, fault_scope, parse_xid_policy
from fleetctl.nodes.gpu_quarantine import (
    NotAGpuAddress,
    QuarantineAction,
    decide_scope,
    gpu_key,
    gpu_share,
    gpus_usable,
)

SITE = parse_xid_policy({"xid": {48: {"scope": "gpu"}, 94: {"scope": "gpu", "severity": "critical"}}}, "site.yaml")
# The kernel's Xid line names the GPU as checks/xid.py reads it: "NVRM: Xid (PCI:0000:2b:00): 48, ...".
GPU = "0000:2b:00"


@pytest.mark.parametrize(
    ("policy", "code", "gpu", "out", "action", "key"),
    [
        (SITE, 48, GPU, [], QuarantineAction.QUARANTINE_GPU, GPU),
        (SITE, 94, "00000000:2B:00.0", [], QuarantineAction.QUARANTINE_GPU, GPU),  # nvidia-smi's spelling
        (SITE, 48, GPU, [GPU], QuarantineAction.ALREADY_OUT, GPU),
        (SITE, 48, GPU, ["0000:9a:00"], QuarantineAction.DRAIN_NODE, ""),  # a second GPU: the board
        (SITE, 48, "", [], QuarantineAction.DRAIN_NODE, ""),  # names no GPU
        (SITE, None, GPU, [], QuarantineAction.DRAIN_NODE, ""),  # no Xid: an operator's report
        (SITE, 79, GPU, [], QuarantineAction.DRAIN_NODE, ""),  # fallen off the bus: the node's
        (CATALOG, 48, GPU, [], QuarantineAction.DRAIN_NODE, ""),  # no site rule: the node, as before
    ],
)
def test_a_fault_takes_out_what_the_policy_scopes_it_to(policy, code, gpu, out, action, key) -> None:
    verdict = decide_scope(policy, code, gpu, out)
    assert (verdict.action, verdict.gpu) == (action, key), verdict.reason


def test_a_second_gpu_s_fault_says_which_gpu_is_out_already() -> None:
    verdict = decide_scope(SITE, 48, GPU, ["0000:9a:00"])
    assert verdict.reason == "the node: XID 48 on GPU 0000:2b:00 while GPU 0000:9a:00 is out already"


@pytest.mark.parametrize(
    ("pci", "key"),
    [("0000:2b:00", GPU), ("PCI:0000:2b:00", GPU), ("00000000:2B:00.0", GPU), ("0000:9A:00.0", "0000:9a:00")],
)
def test_every_spelling_of_a_gpu_s_address_is_one_gpu(pci, key) -> None:
    assert gpu_key(pci) == key


@pytest.mark.parametrize("pci", ["gpu3", "3", "0000:2b", "0000:2b:00:00", "0000:zz:00"])
def test_what_is_not_a_pci_address_is_refused_naming_it(pci) -> None:
    with pytest.raises(NotAGpuAddress, match="is not a GPU's PCI address"):
        gpu_key(pci)


@pytest.mark.parametrize(("gpus", "share"), [(8, 0.125), (4, 0.25), (1, 1.0)])
def test_one_gpu_out_costs_its_share_of_the_node(gpus, share) -> None:
    assert gpu_share(gpus) == share
    assert gpu_share(gpus) * gpus == 1.0  # every GPU out costs what the node's drain costs


def test_a_node_without_gpus_has_no_share() -> None:
    with pytest.raises(ValueError, match="at least one"):
        gpu_share(0)


@pytest.mark.parametrize(("gpus", "out", "usable"), [(8, 0, 8), (8, 1, 7), (4, 1, 3), (1, 2, 0)])
def test_the_scheduler_places_work_on_the_gpus_left(gpus, out, usable) -> None:
    assert gpus_usable(gpus, out) == usable


def test_the_site_policy_reads_a_scope_per_code() -> None:
    assert fault_scope(SITE, 48) is FaultScope.GPU
    assert fault_scope(SITE, 79) is FaultScope.NODE
    assert fault_scope(SITE, None) is FaultScope.NODE
    assert SITE.xids[94].severity == "critical"  # a scope leaves the other fields as they are


@pytest.mark.parametrize(
    ("document", "words"),
    [
        ({"xid": {48: {"scope": "rack"}}}, "xid 48: scope 'rack' is not one of node, gpu"),
        ({"xid": {48: {"scope": 1}}}, "xid 48: scope '1' is not one of node, gpu"),
        ({"signatures": {"nvswitch_sxid_fatal": {"scope": "gpu"}}}, "scope gpu is for Xid codes only"),
    ],
)
def test_a_bad_scope_is_refused_in_one_line(document, words) -> None:
    with pytest.raises(XidPolicyError, match=words):
        parse_xid_policy(document, "site.yaml")


@pytest.mark.parametrize(("pci", "named"), [("", ""), ("unknown GPU", ""), ("3", ""), ("0000:2B:00.0", GPU)])
def test_an_address_that_names_no_gpu_leaves_the_fault_to_the_node(pci, named) -> None:
    from fleetctl.nodes.gpu_quarantine import named_gpu

    assert named_gpu(pci) == named


def test_the_intake_takes_the_gpu_an_event_names_and_refuses_one_that_is_no_address() -> None:
    import time

    from fleetctl.intake.delivery import signal_of
    from fleetctl.intake.parse import BadBody, from_json

    (ev,) = from_json({"events": [{"node": "n1", "code": 48, "gpu": "00000000:2B:00.0"}]}, time.time())
    assert ev.gpu == GPU and ev.as_dict()["gpu"] == GPU
    (plain,) = from_json({"events": [{"node": "n1", "code": 48}]}, time.time())
    assert "gpu" not in plain.as_dict()  # spooled as it always was
    with pytest.raises(BadBody, match=r"events\[0\].gpu: 'gpu3' is not a GPU's PCI address"):
        from_json({"events": [{"node": "n1", "code": 48, "gpu": "gpu3"}]}, time.time())
    assert signal_of(ev.as_dict())["gpu"] == GPU


def test_the_effective_table_says_which_codes_take_only_their_gpu() -> None:
    from fleetctl.nodes.health import effective_table

    rows = {r.key: r for r in effective_table(SITE) if r.kind == "xid"}
    assert rows["48"].drains == "at once: its GPU only (when the event names it)"
    assert rows["94"].drains == "at once: its GPU only (when the event names it)"
    assert rows["79"].drains == "at once"
