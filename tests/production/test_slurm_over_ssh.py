"""Slurm from a worker that is not a Slurm host: the adapter's commands run on a login host
over the SSH executor (the test sshd, on the machine of the test Slurm cluster), host keys
verified. Run only under `flock /tmp/fleetctl-slurm.lock` (see HELPERS.md)."""

from __future__ import annotations

import pytest

from fleetctl.config import load_settings
from fleetctl.connections.slurm_client import slurm_runner
from fleetctl.schedulers import scheduler_for
from fleetctl.schedulers.base import SchedulerError
from fleetctl.schedulers.slurm import SlurmScheduler, SshCommandRunner
from tests.executors.conftest import ssh_node, ssh_server  # noqa: F401 - fixtures
from tests.schedulers.conftest import slurm_cluster  # noqa: F401 - fixture

pytestmark = [pytest.mark.slurm, pytest.mark.sshd]


def over_ssh(ssh_node, slurm_cluster, **executor_options) -> SlurmScheduler:
    runner = SshCommandRunner(
        ssh_node.executor(**executor_options), ssh_node.target("slurm-login"), slurm_conf=str(slurm_cluster.conf_path)
    )
    return SlurmScheduler(run=runner)


def test_drain_and_resume_run_on_the_login_host(ssh_node, slurm_cluster):
    node = slurm_cluster.node_names[0]
    logins = ssh_node.accepted_logins()
    slurm = over_ssh(ssh_node, slurm_cluster)
    try:
        slurm.drain(node, "over ssh")
        # Seen by Slurm itself (sinfo run here), not only by the adapter's own reading.
        assert "drain" in slurm_cluster.run("sinfo", "-h", "-N", "-n", node, "-o", "%T").lower()
        assert slurm.node_state(node).owned_by_fleetctl
        slurm.resume(node)
        assert "drain" not in slurm_cluster.run("sinfo", "-h", "-N", "-n", node, "-o", "%T").lower()
    finally:
        slurm_cluster.reset()
    assert ssh_node.accepted_logins() > logins  # the commands went over SSH


def test_an_unknown_host_key_is_refused_and_nothing_changes(ssh_node, slurm_cluster, tmp_path):
    node = slurm_cluster.node_names[0]
    (tmp_path / "known_hosts").write_text("")
    slurm = over_ssh(ssh_node, slurm_cluster, known_hosts=tmp_path / "known_hosts")
    with pytest.raises(SchedulerError) as err:
        slurm.drain(node, "must not happen")
    assert "host_key" in str(err.value) and "\n" not in str(err.value)
    assert "drain" not in slurm_cluster.run("sinfo", "-h", "-N", "-n", node, "-o", "%T").lower()


def test_settings_wire_the_ssh_runner_and_never_fall_back_to_local(ssh_node, slurm_cluster):
    settings = load_settings(
        flags={
            "slurm_host": f"{ssh_node.user}@{ssh_node.address}",
            "known_hosts": str(ssh_node.known_hosts),
            "ssh_key_file": str(ssh_node.key_file),
            "slurm_conf": str(slurm_cluster.conf_path),
        },
        env={},
        config_file="/dev/null",
    )
    runner = slurm_runner(settings)
    node = slurm_cluster.node_names[1]
    assert scheduler_for("slurm", settings, slurm_runner=runner).node_state(node).state in (
        "idle",
        "mixed",
        "allocated",
    )
    with pytest.raises(ValueError, match="slurm_host"):
        scheduler_for("slurm", settings)
