"""A real OpenSSH sshd on 127.0.0.1, for the SSH executor's tests and any test needing an SSH node.

`ssh_node` gives a running node (see `SshNode`): a target and an executor that trust it, and
fake GPU tools on its PATH (`nvidia-smi`, `dcgmi`, `all_reduce_perf`, `xhpl`, `mpirun`) that
print what the test set with `set_tool_output` and record their argv. sshd runs in the
foreground as the current user with its own host key, config and authorized_keys; as root
it logs in as root (prohibit-password), otherwise as the current user.

Tests elsewhere reuse them with `from tests.executors.conftest import ssh_node, ssh_server`.
"""

from __future__ import annotations

import os
import pwd
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.executors.sshd import (
    FAKE_MPIRUN,
    FAKE_TOOLS,
    LOOPBACK_HOSTS,
    SSHD,
    SshNode,
    fake_tool_script,
    free_port,
    write_ed25519_key,
)
from tests.support.services import missing_service


@pytest.fixture(scope="session")
def ssh_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SshNode]:
    if SSHD is None:
        missing_service("OpenSSH sshd", "not installed (Debian: openssh-server)")
    account = pwd.getpwuid(os.getuid())
    if Path(account.pw_shell).name in ("nologin", "false"):
        missing_service(
            "OpenSSH sshd",
            f"user {account.pw_name} has no login shell ({account.pw_shell}): sshd cannot run commands as it",
        )
    if os.getuid() == 0:
        # sshd running as root insists on its privilege-separation directory.
        Path("/run/sshd").mkdir(mode=0o755, exist_ok=True)
    root = tmp_path_factory.mktemp("sshd")
    host_key = root / "ssh_host_ed25519_key"
    host_key_line = write_ed25519_key(host_key)
    key_file = root / "id_ed25519"
    (root / "authorized_keys").write_text(write_ed25519_key(key_file) + "\n")
    bin_dir = root / "bin"
    bin_dir.mkdir()
    for tool in FAKE_TOOLS:
        (bin_dir / tool).write_text(fake_tool_script(root / "state"))
    (bin_dir / "mpirun").write_text(FAKE_MPIRUN)
    for script in bin_dir.iterdir():
        script.chmod(0o755)
    # bash run by sshd sources ~/.bashrc: the account's own (a pyenv init that takes a lock, a
    # slow profile) must neither slow the node's commands nor be left broken when a test kills
    # a session mid-startup. The node's sessions get an empty home of their own.
    home = root / "home"
    home.mkdir()
    port = free_port()
    config = root / "sshd_config"
    listen = "\n".join(f"ListenAddress {host}" for host in LOOPBACK_HOSTS)
    config.write_text(
        f"""Port {port}
{listen}
HostKey {host_key}
PidFile {root / "sshd.pid"}
AuthorizedKeysFile {root / "authorized_keys"}
StrictModes no
UsePAM no
PubkeyAuthentication yes
PasswordAuthentication no
KbdInteractiveAuthentication no
PermitRootLogin prohibit-password
AllowTcpForwarding yes
MaxSessions 32
MaxStartups 64
PrintMotd no
SetEnv PATH={bin_dir}:/usr/local/bin:/usr/bin:/bin HOME={home}
LogLevel VERBOSE
"""
    )
    known_hosts = root / "known_hosts"
    known_hosts.write_text("".join(f"[{host}]:{port} {host_key_line}\n" for host in LOOPBACK_HOSTS))
    node = SshNode(
        host="127.0.0.1",
        port=port,
        user=account.pw_name,
        key_file=key_file,
        host_key_line=host_key_line,
        known_hosts=known_hosts,
        root=root,
        bin_dir=bin_dir,
        config=config,
        log=root / "sshd.log",
    )
    node.start()
    yield node
    node.stop()


@pytest.fixture
def ssh_node(ssh_server: SshNode) -> Iterator[SshNode]:
    """The session's sshd node, with the fake tools reset to their fixture outputs."""
    if ssh_server.process is None or ssh_server.process.poll() is not None:
        ssh_server.start()
    ssh_server.reset_tools()
    yield ssh_server
