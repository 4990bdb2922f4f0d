from __future__ import annotations

import pytest

from fleetctl.config import ConfigError, load_settings


def test_precedence_flags_over_env_over_file_over_defaults(tmp_path) -> None:
    cfg = tmp_path / "c.yaml"
    cfg.write_text("temporal_address: file:1\ntask_queue: from-file\nnamespace_unused: 1\n".replace("namespace_unused: 1\n", "temporal_namespace: fileNs\n"))
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
    assert load_settings(flags={"accept_new_host_keys": True}, env={}, config_file=empty).sources["accept_new_host_keys"] == "flag"
