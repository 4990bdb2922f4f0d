"""A site profile whose thresholds would pass every node (a floor of 0, a ceiling at the
highest figure there is, rails required at a rate of 0) is refused in one line naming the
file and the field, as an out-of-bounds one is: an operator's edit of a copied profile must
not pass a sick fleet silently. The site profile is the test site's real one
(tests/fixtures/checks/site_profiles/h100-roce-1x400.yaml), one line of it changed."""

from __future__ import annotations

import os
import shutil

import pytest
from typer.testing import CliRunner

from fleetctl.checks.profiles import ProfileError, fails_no_node, load_profile, profile_names
from fleetctl.cli.main import app
from tests.support.fixtures import FIXTURES

SITE = FIXTURES / "site_profiles"
ROCE = "h100-roce-1x400"


@pytest.mark.parametrize(
    "line, edited, said",
    [
        (
            "nccl_allreduce_busbw_gbps: {warn: 460, fail: 415}",
            "nccl_allreduce_busbw_gbps: {warn: 460, fail: 0}",
            "nccl_allreduce_busbw_gbps: a floor failing at 0 fails no node",
        ),
        (
            "host_memory_gib: {warn: 1980, fail: 1840}",
            "host_memory_gib: {warn: 0, fail: 0}",
            "host_memory_gib: a floor failing at 0 fails no node",
        ),
        (
            "filesystem_use_percent: {warn: 85, fail: 95}",
            "filesystem_use_percent: {warn: 85, fail: 100}",
            "filesystem_use_percent: a ceiling failing above 100 % fails no node",
        ),
        (
            "ecc_corrected_volatile: {warn: 10000, fail: 20000000}",
            "ecc_corrected_volatile: {warn: 10000, fail: 1000000000000}",
            "ecc_corrected_volatile: a ceiling failing above 1e+12 errors fails no node",
        ),
        (
            "roce_rate_gbps: 400",
            "roce_rate_gbps: 0",
            "roce_rate_gbps: roce_port_count 1 at a rate of 0 Gb/s passes any rate",
        ),
    ],
)
def test_a_site_profile_that_fails_no_node_is_refused_in_one_line(tmp_path, line, edited, said) -> None:
    site = tmp_path / "profiles"
    shutil.copytree(SITE, site)
    path = site / f"{ROCE}.yaml"
    text = path.read_text()
    assert line in text  # the fixture still says what the edit changes
    path.write_text(text.replace(line, edited, 1))
    with pytest.raises(ProfileError) as refused:
        load_profile(ROCE, site)
    assert str(refused.value).startswith(f"site profile {path}: {said}; "), refused.value
    result = CliRunner().invoke(
        app, ["check", "profiles"], env={"FLEETCTL_CONFIG": os.devnull, "FLEETCTL_PROFILES_DIR": str(site)}
    )
    assert result.exit_code == 2 and result.stdout == "", result.output
    assert result.stderr.count("\n") == 1 and str(path) in result.stderr and said in result.stderr, result.stderr


def test_every_packaged_profile_and_the_test_site_fails_a_sick_node() -> None:
    """What the site rule asks holds of every profile shipped (a site's copy of one loads),
    and zero counts keep their meaning: the test site's ib_port_count 0 is a RoCE fabric."""
    for name in profile_names(SITE):
        assert fails_no_node(load_profile(name, SITE)) is None, name
    assert load_profile(ROCE, SITE).ib_port_count == 0
