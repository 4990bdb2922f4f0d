"""Site profiles: an operator's GPU profiles in the `profiles_dir` setting's directory
(FLEETCTL_PROFILES_DIR), validated at load exactly as the packaged ones are (one schema, every
threshold bounded), listed by `fleetctl check profiles`; a packaged name is never shadowed."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from fleetctl.checks import Status, judge
from fleetctl.checks.profiles import (
    _BOUNDS,
    _FIELD_TYPES,
    _LISTS,
    _OPTIONAL,
    ProfileError,
    _packaged_names,
    load_profile,
    profile_names,
    profile_source,
)
from fleetctl.cli.main import app
from tests.support.fixtures import FIXTURES, fixture_text

SITE = FIXTURES / "site_profiles"
ROCE = "h100-roce-1x400"
runner = CliRunner()


@pytest.fixture
def site(tmp_path) -> Path:
    """A copy of the test site's profiles directory, to break in each test."""
    directory = tmp_path / "profiles"
    shutil.copytree(SITE, directory)
    return directory


def test_a_roce_node_is_judged_by_the_site_profile_and_on_its_roce_rails_by_a_packaged_one(monkeypatch):
    monkeypatch.setenv("FLEETCTL_PROFILES_DIR", str(SITE))
    healthy, down = fixture_text("ib/ibstat_roce_400g_ok.txt"), fixture_text("ib/ibstat_roce_400g_rail_down_fail.txt")
    assert judge("ib", healthy, ROCE).status is Status.PASS
    result = judge("ib", down, ROCE)
    assert result.status is Status.FAIL and any(
        "0 Ethernet rails Active/LinkUp at 400" in f.what for f in result.findings
    )
    for packaged in _packaged_names():
        # Every shipped profile expects InfiniBand rails: the host's Ethernet ports stand for
        # them, held to the profile's count and rate (one 400 GbE rail is not 4 or 8).
        result = judge("ib", healthy, packaged)
        assert result.status is Status.FAIL
        assert any("Ethernet (RoCE) rails Active/LinkUp" in f.what for f in result.findings)


def test_the_setting_reaches_check_parse_and_check_profiles_lists_the_site_profile():
    env = {"FLEETCTL_PROFILES_DIR": str(SITE)}
    listed = runner.invoke(app, ["check", "profiles", "-o", "json"], env=env)
    assert listed.exit_code == 0, listed.output
    rows = {r["name"]: r for r in json.loads(listed.stdout)}
    assert rows[ROCE]["source"] == str(SITE / f"{ROCE}.yaml") and rows["h100-sxm"]["source"] == "packaged"
    assert (rows[ROCE]["roce_port_count"], rows[ROCE]["ib_port_count"]) == (1, 0)
    parsed = runner.invoke(
        app,
        [
            "check",
            "parse",
            "ib",
            str(FIXTURES / "ib/ibstat_roce_400g_rail_down_fail.txt"),
            "--profile",
            ROCE,
            "-o",
            "json",
        ],
        env=env,
    )
    assert parsed.exit_code == 3 and json.loads(parsed.stdout)["status"] == "fail"
    without = runner.invoke(
        app, ["check", "parse", "ib", str(FIXTURES / "ib/ibstat_roce_400g_ok.txt"), "--profile", ROCE]
    )
    assert without.exit_code == 2 and "unknown GPU profile" in without.stderr


def test_a_site_profile_named_like_a_packaged_one_is_refused_in_one_line(site):
    (site / "h100-sxm.yaml").write_text((SITE / f"{ROCE}.yaml").read_text().replace(f"name: {ROCE}", "name: h100-sxm"))
    result = runner.invoke(app, ["check", "profiles"], env={"FLEETCTL_PROFILES_DIR": str(site)})
    assert result.exit_code == 2 and result.stderr.count("\n") == 1
    assert "has the name of a packaged profile" in result.stderr
    with pytest.raises(ProfileError):
        load_profile("h100-sxm", site)  # never the site's thresholds in the packaged one's place


# (what the line becomes, what the refusal says): each a profile no node may be judged by
BROKEN = [
    ("roce_rate_gbps: 400", "roce_rate_gbps: 400000", "outside 0..1600 Gb/s"),
    (
        "nccl_multinode_busbw_gbps: {warn: 46, fail: 41}",
        "nccl_multinode_busbw_gbps: {warn: 41, fail: 46}",
        "warn 41 must be at or above fail 46",
    ),
    ("gpu_temperature_c: {warn: 83, fail: 87}", "gpu_temperature_c: {warn: 90, fail: 87}", "must be at or below"),
    ("gpu_temperature_c: {warn: 83, fail: 87}", "gpu_temperature_c: {warn: 83, fail: .nan}", "expected a number"),
    ("gpu_count: 8", "gpu_count: 8.5", "expected a whole number"),
    ("gpu_count: 8", "gpu_count: true", "expected a whole number"),
    ("gpu_count: 8", "gpu_count: 0", "outside 1..16"),
    ("ib_port_count: 0  # the compute fabric is RoCE", "", "missing field 'ib_port_count'"),
    ("roce_port_count: 1", "roce_port_count: 1\nroce_mtu: 4096", "unknown field 'roce_mtu'"),
    (f"name: {ROCE}", "name: other", "names itself"),
    ('gpu_name_patterns: ["H100 80GB HBM3", "H100 SXM"]', "gpu_name_patterns: []", "gpu_name_patterns"),
    ("ib_write_bw_gbps: {warn: 340, fail: 300}", "ib_write_bw_gbps: 340", "expected {warn: N, fail: N}"),
    ("required_mounts: [/lustre]", "required_mounts: [lustre; rm -rf /]", "required_mounts: expected a list"),
    ('driver_versions: ["550.90.07"]', "driver_versions: 550.90.07", "driver_versions: expected a list"),
]


@pytest.mark.parametrize(("line", "broken", "message"), BROKEN, ids=[b[2] for b in BROKEN])
def test_a_site_profile_outside_the_schema_or_its_bounds_is_refused_at_load(site, line, broken, message):
    path = site / f"{ROCE}.yaml"
    text = path.read_text()
    assert line in text
    path.write_text(text.replace(line, broken, 1))
    with pytest.raises(ProfileError, match=message.replace("{", r"\{").replace("}", r"\}").replace(".", r"\.")):
        load_profile(ROCE, site)
    result = runner.invoke(app, ["check", "profiles"], env={"FLEETCTL_PROFILES_DIR": str(site)})
    assert result.exit_code == 2 and message in result.stderr and result.stderr.count("\n") == 1


def test_an_edited_site_profile_is_read_again(site):
    path = site / f"{ROCE}.yaml"
    assert load_profile(ROCE, site).roce_rate_gbps == 400
    path.write_text(path.read_text().replace("roce_rate_gbps: 400", "roce_rate_gbps: 200"))
    import os

    stat = path.stat()
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns + 1_000_000_000))
    assert load_profile(ROCE, site).roce_rate_gbps == 200


def test_a_missing_site_directory_is_an_error_not_the_packaged_profiles_alone(tmp_path):
    with pytest.raises(ProfileError, match="does not exist"):
        profile_names(tmp_path / "nowhere")


def test_the_packaged_profiles_pass_the_same_validation_and_every_number_is_bounded():
    numbers = {f for f in _FIELD_TYPES if f not in ("name", "description", "gpu_name_patterns", *_LISTS, *_OPTIONAL)}
    assert set(_BOUNDS) == numbers
    for name in _packaged_names():
        assert load_profile(name).name == name and profile_source(name) == "packaged"


def test_the_profiles_dir_setting_from_the_config_file_reaches_the_check_commands(tmp_path):
    config = tmp_path / "fleetctl.yaml"
    config.write_text(f"profiles_dir: {SITE}\n")
    result = runner.invoke(
        app,
        ["check", "parse", "ib", str(FIXTURES / "ib/ibstat_roce_400g_ok.txt"), "--profile", ROCE, "-o", "json"],
        env={"FLEETCTL_CONFIG": str(config)},
    )
    assert result.exit_code == 0 and json.loads(result.stdout)["status"] == "pass", result.output


def test_the_profiles_dir_setting_from_the_config_file_reaches_node_import(tmp_path):
    """`node import` knows the profiles the worker judges by: a node of a site profile named in
    the config file (not the environment) is accepted, and refused without the setting."""
    inventory = tmp_path / "inventory.yaml"
    inventory.write_text(f"nodes: [{{name: roce-1, address: roce-1, profile: {ROCE}}}]\n")
    config = tmp_path / "fleetctl.yaml"
    db = f"sqlite:///{tmp_path}/fleet.db"
    for settings, accepted in ((f"profiles_dir: {SITE}\n", True), ("", False)):
        config.write_text(settings)
        result = runner.invoke(
            app,
            ["--db-url", db, "node", "import", str(inventory), "--dry-run"],
            env={"FLEETCTL_CONFIG": str(config), "FLEETCTL_PROFILES_DIR": ""},
        )
        assert (result.exit_code == 0) is accepted, result.output
        assert accepted or ROCE in result.stderr


def test_the_agents_sampler_judges_by_the_site_profile_it_is_given():
    from fleetctl.agent.sampler import SampleTracker

    text = fixture_text("ib/ibstat_roce_400g_ok.txt")
    with pytest.raises(ValueError):
        SampleTracker(ROCE, "ib").observe(text, now=0.0, settled_at=0.0)  # the packaged profiles alone do not know it
    assert SampleTracker(ROCE, "ib", profiles_dir=str(SITE)).observe(text, now=0.0, settled_at=0.0) == []
