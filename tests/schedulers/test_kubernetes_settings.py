"""The Kubernetes drain settings: checked strictly when settings load, and used by the adapter
that scheduler_for builds."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from fleetctl.config import ConfigError, load_settings
from fleetctl.schedulers import scheduler_for
from fleetctl.schedulers.kubernetes import KubernetesScheduler
from tests.schedulers.kube_emulator import KubeEmulator


@pytest.mark.parametrize(
    "variable, value, error",
    [
        (
            "FLEETCTL_KUBE_DRAIN_POLICY",
            "namespace:serve=later",
            r"^setting kube_drain_policy: drain policy rule 'namespace:serve=later': expected",
        ),
        (
            "FLEETCTL_KUBE_DRAIN_POLICY",
            "label:app=vllm",
            r"^setting kube_drain_policy: drain policy rule 'label:app=vllm': expected",
        ),
        (
            "FLEETCTL_KUBE_DRAIN_POLICY",
            "label:-app=vllm=wait",
            r"^setting kube_drain_policy: drain policy rule 'label:-app=vllm=wait': label '-app=vllm' is not",
        ),
        (
            "FLEETCTL_KUBE_DO_NOT_EVICT_ANNOTATION",
            "no spaces/allowed here",
            r"^setting kube_do_not_evict_annotation: 'no spaces/allowed here' is not an annotation key",
        ),
        (
            "FLEETCTL_KUBE_INFRASTRUCTURE_OWNER_KINDS",
            "NodeSet,daemonset",
            r"^setting kube_infrastructure_owner_kinds: 'daemonset' is not a Kubernetes kind",
        ),
        ("FLEETCTL_KUBE_EVICTION_GRACE_PERIOD_S", "-2", r"^setting kube_eviction_grace_period_s: -2 is not between"),
        ("FLEETCTL_KUBE_EVICTION_GRACE_PERIOD_S", "86401", r"^setting kube_eviction_grace_period_s: 86401"),
        (
            "FLEETCTL_KUBE_CRITICAL_TAINT_EFFECT",
            "PreferNoSchedule",
            r"^setting kube_critical_taint_effect: 'PreferNoSchedule' is not one of NoSchedule, NoExecute",
        ),
        ("FLEETCTL_KUBE_HEALTH_CONDITION", "Ready", r"^setting kube_health_condition: 'Ready' is not"),
        ("FLEETCTL_KUBE_HEALTH_CONDITION", "gpu-healthy", r"^setting kube_health_condition: 'gpu-healthy' is not"),
    ],
)
def test_a_bad_kubernetes_setting_stops_loading_with_one_line_naming_it(
    variable: str, value: str, error: str, tmp_path: Path
) -> None:
    with pytest.raises(ConfigError, match=error) as raised:
        load_settings(env={variable: value}, config_file=_empty(tmp_path))
    assert "\n" not in str(raised.value) and f"(from env {variable})" in str(raised.value)


def test_a_bad_setting_in_the_config_file_names_the_file(tmp_path: Path) -> None:
    config = tmp_path / "fleetctl.yaml"
    config.write_text("kube_critical_taint_effect: NoRun\n")
    with pytest.raises(ConfigError, match=rf"kube_critical_taint_effect: 'NoRun' .* \(from file {config}\)"):
        load_settings(env={}, config_file=config)


def test_defaults_are_valid_and_name_the_nodeset_as_infrastructure(tmp_path: Path) -> None:
    settings = load_settings(env={}, config_file=_empty(tmp_path))
    assert (settings.kube_infrastructure_owner_kinds, settings.kube_critical_taint_effect) == ("NodeSet", "NoExecute")
    assert (settings.kube_drain_policy, settings.kube_eviction_grace_period_s) == ("", -1)


@pytest.fixture
def kube() -> Iterator[KubeEmulator]:
    with KubeEmulator() as emulator:
        yield emulator


def test_scheduler_for_builds_the_adapter_with_the_drain_settings(kube: KubeEmulator, tmp_path: Path) -> None:
    settings = load_settings(
        env={
            "KUBECONFIG": str(kube.write_kubeconfig(tmp_path / "kubeconfig")),
            "FLEETCTL_KUBE_DRAIN_POLICY": "namespace:serve=wait",
            "FLEETCTL_KUBE_INFRASTRUCTURE_OWNER_KINDS": "SlurmNodeSet",
            "FLEETCTL_KUBE_EVICTION_GRACE_PERIOD_S": "30",
        },
        config_file=_empty(tmp_path),
    )
    kube.add_node("gpu-1")
    kube.add_pod("serve", "vllm-0", "gpu-1")
    kube.add_pod("slurm", "slurmd-gpu-1", "gpu-1", owner_kind="SlurmNodeSet")
    kube.add_pod("train", "llm-0", "gpu-1")

    scheduler = scheduler_for("kubernetes", settings)
    assert isinstance(scheduler, KubernetesScheduler)
    progress = scheduler.drain_pods("gpu-1")

    assert progress.holding == ("serve/vllm-0: policy waits for it to complete",)
    assert progress.left == ("slurm/slurmd-gpu-1: owned by SlurmNodeSet slurmd-gpu-1-owner",)
    assert kube.eviction_grace == [("train/llm-0", 30)]


def _empty(tmp_path: Path) -> Path:
    path = tmp_path / "empty.yaml"
    path.write_text("")
    return path
