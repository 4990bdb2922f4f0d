"""The SSH jump host from the inventory (`jump: user@bastion`) and from the ssh_jump_host
setting, through a real sshd on 127.0.0.1 serving as both bastion and node.

The bastion is the sshd named `127.0.0.1:PORT`, the node the same sshd named
`localhost:PORT`, reached from the bastion over direct-tcpip: two logins, and two known_hosts
entries, so each hop's host key is looked up (and refused) under its own name."""

from __future__ import annotations

import os

import pytest

from fleetctl.config import ConfigError, load_settings
from fleetctl.db import queries
from fleetctl.db.engine import get_engine
from fleetctl.executors.base import HostKeyMismatch
from fleetctl.inventory.parse import InventoryError, parse_inventory
from fleetctl.workflows.activities.executors import ExecutorRegistry, target_for
from tests.executors.sshd import SshNode, write_ed25519_key

pytestmark = pytest.mark.usefixtures("ssh_node")


def _known_hosts(tmp_path, ssh_node: SshNode, bastion: str | None, node: str | None):
    """A known_hosts file listing the given host key line for each hop (None: not listed)."""
    path = tmp_path / "known_hosts"
    lines = [
        f"[127.0.0.1]:{ssh_node.port} {bastion}" if bastion else "",
        f"[localhost]:{ssh_node.port} {node}" if node else "",
    ]
    path.write_text("".join(line + "\n" for line in lines if line))
    return path


def _fleet(sqlite_url: str, ssh_node: SshNode, known_hosts, jump_line: str = "", env: dict | None = None):
    """The node imported from an inventory, and a worker's executor registry from settings."""
    settings = load_settings(
        flags={"db_url": sqlite_url, "known_hosts": str(known_hosts)},
        env={"FLEETCTL_SSH_KEY_FILE": str(ssh_node.key_file), **(env or {})},
        config_file=os.devnull,
    )
    engine = get_engine(sqlite_url)
    queries.upsert_nodes(
        engine,
        parse_inventory(
            f"nodes:\n  - {{name: gpu-behind-01, address: 'localhost:{ssh_node.port}', user: {ssh_node.user}, "
            f"profile: h100-sxm{jump_line}}}\n"
        ),
    )
    node = queries.get_node(engine, "gpu-behind-01")
    registry = ExecutorRegistry(settings)
    return registry, target_for(node)


def _run(registry: ExecutorRegistry, target):
    try:
        return registry.for_target(target).run(target, ["sh", "-c", "echo reached"], timeout_s=10)
    finally:
        registry.close()


def test_the_inventorys_jump_reaches_the_node_through_the_bastion(ssh_node: SshNode, sqlite_url, tmp_path) -> None:
    known = _known_hosts(tmp_path, ssh_node, ssh_node.host_key_line, ssh_node.host_key_line)
    registry, target = _fleet(sqlite_url, ssh_node, known, f", jump: '{ssh_node.user}@127.0.0.1:{ssh_node.port}'")
    assert target.jump_host == f"{ssh_node.user}@127.0.0.1:{ssh_node.port}"
    logins = ssh_node.accepted_logins()
    assert _run(registry, target).stdout == "reached\n"
    assert ssh_node.accepted_logins() - logins == 2  # the bastion's login, then the node's through it


def test_the_setting_is_the_jump_of_nodes_that_name_none(ssh_node: SshNode, sqlite_url, tmp_path) -> None:
    known = _known_hosts(tmp_path, ssh_node, ssh_node.host_key_line, ssh_node.host_key_line)
    registry, target = _fleet(
        sqlite_url, ssh_node, known, env={"FLEETCTL_SSH_JUMP_HOST": f"{ssh_node.user}@127.0.0.1:{ssh_node.port}"}
    )
    assert target.jump_host is None
    logins = ssh_node.accepted_logins()
    assert _run(registry, target).stdout == "reached\n"
    assert ssh_node.accepted_logins() - logins == 2


@pytest.mark.parametrize(
    "hop, listed", [("bastion", "unknown"), ("node", "unknown"), ("bastion", "changed"), ("node", "changed")]
)
def test_each_hops_host_key_is_verified(ssh_node: SshNode, sqlite_url, tmp_path, hop: str, listed: str) -> None:
    other = None if listed == "unknown" else write_ed25519_key(tmp_path / "another_host_key")
    known = _known_hosts(
        tmp_path,
        ssh_node,
        other if hop == "bastion" else ssh_node.host_key_line,
        other if hop == "node" else ssh_node.host_key_line,
    )
    registry, target = _fleet(sqlite_url, ssh_node, known, f", jump: '{ssh_node.user}@127.0.0.1:{ssh_node.port}'")
    with pytest.raises(HostKeyMismatch) as caught:
        _run(registry, target)
    message = str(caught.value)
    name = f"127.0.0.1]:{ssh_node.port}" if hop == "bastion" else f"localhost]:{ssh_node.port}"
    assert name in message and ("unknown host key" if listed == "unknown" else "CHANGED") in message, message
    assert message.startswith("gpu-behind-01: ") and "\n" not in message


@pytest.mark.parametrize("jump", ["'ops@bastion one'", "'sim://bastion'", '"ops@bastion\\n"', "[a, b]"])
def test_a_bad_jump_is_refused_with_the_entry_named(jump: str) -> None:
    with pytest.raises(InventoryError, match=r"nodes\[0\] \(n1\): field 'jump'"):
        parse_inventory(f"nodes:\n  - {{name: n1, address: n1, profile: h100-sxm, jump: {jump}}}\n")


def test_a_bad_jump_setting_is_refused() -> None:
    with pytest.raises(ConfigError, match=r"ssh_jump_host.*must be"):
        load_settings(env={"FLEETCTL_SSH_JUMP_HOST": "ops@bastion one"}, config_file=os.devnull)
