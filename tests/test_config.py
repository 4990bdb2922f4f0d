from __future__ import annotations

import re

import pytest

from fleetctl.config import SECRET_SETTINGS, ConfigError, load_settings


def test_precedence_flags_over_env_over_file_over_defaults(tmp_path) -> None:
    cfg = tmp_path / "c.yaml"
    cfg.write_text(
        "temporal_address: file:1\ntask_queue: from-file\nnamespace_unused: 1\n".replace(
            "namespace_unused: 1\n", "temporal_namespace: fileNs\n"
        )
    )
    env = {"TEMPORAL_ADDRESS": "env:2", "FLEETCTL_TASK_QUEUE": "from-env"}
    s = load_settings(flags={"task_queue": "from-flag"}, env=env, config_file=cfg)
    assert (s.temporal_address, s.task_queue, s.temporal_namespace) == ("env:2", "from-flag", "fileNs")
    assert s.sources["task_queue"] == "flag" and s.sources["temporal_address"] == "env TEMPORAL_ADDRESS"
    assert s.sources["temporal_namespace"].startswith("file ")
    assert s.db_url.startswith("sqlite:///") and s.sources["db_url"] == "default"


def test_unknown_setting_in_file_is_an_error(tmp_path) -> None:
    cfg = tmp_path / "c.yaml"
    cfg.write_text("temporal_adress: x\n")
    with pytest.raises(ConfigError, match="unknown setting 'temporal_adress'"):
        load_settings(env={}, config_file=cfg)


def test_bad_number_is_an_error() -> None:
    with pytest.raises(ConfigError, match="sim_time_scale"):
        load_settings(env={"FLEETCTL_SIM_TIME_SCALE": "fast"})


def test_trust_on_first_use_only_when_asked(tmp_path) -> None:
    empty = tmp_path / "empty.yaml"
    empty.write_text("")
    assert load_settings(env={}, config_file=empty).accept_new_host_keys is False
    assert load_settings(env={"FLEETCTL_ACCEPT_NEW_HOST_KEYS": "1"}, config_file=empty).accept_new_host_keys is True
    assert (
        load_settings(flags={"accept_new_host_keys": True}, env={}, config_file=empty).sources["accept_new_host_keys"]
        == "flag"
    )


def test_each_fleet_reads_its_own_guard_limits_bounded_like_the_global_ones(tmp_path) -> None:
    from fleetctl.config import guard_policy

    cfg = tmp_path / "c.yaml"
    cfg.write_text(
        "guard_max_unavailable_fleet: 0.1\n"
        "guard_fleets: {blue: {guard_max_unavailable_fleet: 0.3, guard_storm_window_s: 60}}\n"
    )
    s = load_settings(env={"FLEETCTL_AUTOMATION_DRY_RUN": "yes"}, config_file=cfg)
    blue, green = guard_policy(s, "blue"), guard_policy(s, "green")
    assert (blue.max_unavailable_fleet, blue.storm_window_s, blue.max_unavailable_rack) == (0.3, 60.0, 0.25)
    assert (green.max_unavailable_fleet, green.storm_window_s) == (0.1, 600.0)
    assert blue.dry_run and green.dry_run
    for bad, message in [
        ("guard_fleets: {blue: {guard_max_unavailable_fleet: nan}}", "out of range"),
        ("guard_fleets: {blue: {guard_max_unavailable_fleet: 1.5}}", "out of range"),
        ("guard_fleets: {blue: {guard_storm_window_s: -1}}", "out of range"),
        ("guard_fleets: {blue: {max_unavailable: 0.2}}", "unknown setting 'max_unavailable'"),
        ("guard_fleets: [blue]", "expected a mapping"),
        ("guard_fleets: {blue: 0.2}", "expected a mapping"),
    ]:
        cfg.write_text(bad + "\n")
        with pytest.raises(ConfigError, match=message):
            load_settings(env={}, config_file=cfg)


@pytest.mark.parametrize(
    "name, value, message",
    [
        ("prometheus_url", "ftp://prom:9090", "must be http(s)://host"),
        ("prometheus_url", "https://user:secret@prom:9090", "credentials do not belong in the URL"),
        ("prometheus_url", "https://prom:9090/?x=1", "must not carry a query"),
        ("prometheus_url", "http://prom:99999", "not a URL"),
        ("prometheus_url", "prom:9090", "must be http(s)://host"),
        ("prometheus_node_label", "__name__", "is not a Prometheus label name"),
        ("prometheus_node_label", 'Hostname"}', "is not a Prometheus label name"),
        ("prometheus_timeout_s", "0", "out of range"),
        ("prometheus_timeout_s", "nan", "out of range"),
        ("straggler_window_s", "1", "out of range"),
        ("straggler_threshold", "inf", "out of range"),
        ("straggler_min_nodes", "2", "out of range"),
        ("straggler_interval_s", "0.5", "out of range"),
        ("straggler_policy", "drain-now", "is not a policy (one of flag-only, drain-at-checkpoint)"),
    ],
)
def test_straggler_settings_are_checked(name, value, message) -> None:
    with pytest.raises(ConfigError, match=re.escape(message)):
        load_settings(flags={name: value}, env={}, config_file="/dev/null")


def test_the_prometheus_token_goes_only_to_https() -> None:
    with pytest.raises(ConfigError, match="sent only to an https prometheus_url"):
        load_settings(
            flags={"prometheus_url": "http://prom:9090", "prometheus_token": "t0k3n"}, env={}, config_file="/dev/null"
        )
    s = load_settings(
        flags={
            "prometheus_url": "https://prom.example:9090/prom",
            "prometheus_token": "t0k3n",
            "straggler_policy": "drain-at-checkpoint",
        },
        env={},
        config_file="/dev/null",
    )
    assert (s.prometheus_url, s.straggler_policy) == ("https://prom.example:9090/prom", "drain-at-checkpoint")
    assert "prometheus_token" in SECRET_SETTINGS


@pytest.mark.parametrize("value", ["699", "1000001", "many"])
def test_a_young_generation_out_of_bounds_is_refused(value) -> None:
    with pytest.raises(ConfigError, match="worker_gc_young"):
        load_settings(env={"FLEETCTL_WORKER_GC_YOUNG": value}, config_file="/dev/null")
