"""Settings at the edge, through the real CLI: `--tls/--no-tls`, booleans parsed strictly
(spaces and the empty string refused in one line, never quietly on or off), and `fleetctl
config` showing what Temporal is reached with and where each part came from (the Temporal
CLI profile included)."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from fleetctl.cli.main import app

PROFILE = """
[profile.prod]
address = "temporal.prod.example:7233"
namespace = "prod-ns"
api_key = "profile-secret-key"
[profile.prod.tls]
server_name = "temporal.prod.example"
"""


def fleetctl(*args: str, env: dict | None = None):
    return CliRunner().invoke(
        app, list(args), env={"FLEETCTL_CONFIG": "/dev/null", "TEMPORAL_CONFIG_FILE": "/dev/null", **(env or {})}
    )


def config_rows(*flags: str, env: dict | None = None) -> dict[str, tuple[str, str]]:
    result = fleetctl(*flags, "config", "-o", "json", env=env)
    assert result.exit_code == 0, result.output
    return {row["setting"]: (row["value"], row["source"]) for row in json.loads(result.stdout)}


@pytest.mark.parametrize("flag, said, tls", [("--tls", "true", "on"), ("--no-tls", "false", "off")])
def test_the_tls_flags_work(flag, said, tls) -> None:
    rows = config_rows(flag)
    assert rows["temporal_tls"] == (said, "flag") and rows["temporal.tls"] == (tls, "flag")


@pytest.mark.parametrize(
    "variable",
    ["TEMPORAL_TLS", "FLEETCTL_BMC_VERIFY_TLS", "FLEETCTL_REMEDIATION_SHADOW", "FLEETCTL_ACCEPT_NEW_HOST_KEYS"],
)
@pytest.mark.parametrize("raw", ["TRUE ", " true", "", "enabled"])
def test_a_boolean_is_strictly_a_word_of_the_readme_or_one_line(variable, raw) -> None:
    result = fleetctl("config", env={variable: raw})
    assert result.exit_code == 2 and len(result.output.strip().splitlines()) == 1, result.output
    assert ("is empty" if raw == "" else "is not a boolean") in result.output


@pytest.mark.parametrize("raw, said", [("TRUE", "true"), ("on", "true"), ("0", "false"), ("No", "false")])
def test_the_readmes_words_in_any_case_are_read(raw, said) -> None:
    assert config_rows(env={"TEMPORAL_TLS": raw})["temporal_tls"] == (said, "env TEMPORAL_TLS")


def test_a_yaml_boolean_in_the_config_file_is_a_tls_setting(tmp_path) -> None:
    path = tmp_path / "config.yaml"
    path.write_text("temporal_tls: false\n")
    assert config_rows("--config", str(path))["temporal_tls"] == ("false", f"file {path}")


def test_config_shows_the_temporal_profiles_values_and_where_each_came_from(tmp_path) -> None:
    profile = tmp_path / "temporal.toml"
    profile.write_text(PROFILE)
    rows = config_rows("--temporal-profile", "prod", "--namespace", "mine", env={"TEMPORAL_CONFIG_FILE": str(profile)})
    where = f"profile prod of {profile}"
    assert rows["temporal.address"] == ("temporal.prod.example:7233", where)
    assert rows["temporal.namespace"] == ("mine", "flag")
    assert rows["temporal.api_key"] == ("(set)", where)  # never the key itself
    assert rows["temporal.tls_server_name"] == ("temporal.prod.example", where)
    assert rows["temporal.tls"] == ("on", where)
    assert rows["temporal.tls_cert_path"] == ("", "default")
    assert "profile-secret-key" not in json.dumps(rows)
