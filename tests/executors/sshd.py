"""A real OpenSSH sshd on 127.0.0.1 posing as a GPU node; the fixtures are in conftest.py."""

from __future__ import annotations

import os
import shlex
import shutil
import signal
import socket
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from cryptography.hazmat.primitives.serialization import (
    BestAvailableEncryption,
    Encoding,
    KeySerializationEncryption,
    NoEncryption,
    PrivateFormat,
    PublicFormat,
)

from fleetctl.executors.base import NodeTarget
from fleetctl.executors.ssh import SshExecutor

SSHD = shutil.which("sshd", path=f"/usr/sbin:/usr/local/sbin:{os.environ.get('PATH', '')}")
FAKE_TOOLS = ("nvidia-smi", "dcgmi", "all_reduce_perf", "xhpl", "nvme")
FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "ssh"


def write_ed25519_key(path: Path, passphrase: bytes | None = None) -> str:
    """Writes a new private key in OpenSSH format; returns its public key line."""
    key = Ed25519PrivateKey.generate()
    encryption: KeySerializationEncryption = BestAvailableEncryption(passphrase) if passphrase else NoEncryption()
    path.write_bytes(key.private_bytes(Encoding.PEM, PrivateFormat.OpenSSH, encryption))
    path.chmod(0o600)
    return key.public_key().public_bytes(Encoding.OpenSSH, PublicFormat.OpenSSH).decode()


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _children(pid: int) -> list[int]:
    children = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rpartition(")")[2].split()
        except OSError:
            continue  # exited while we looked
        if int(fields[1]) == pid:
            children.append(int(stat.parent.name))
    return children


def process_alive(pid: int) -> bool:
    """True while pid runs; a zombie (exited, not yet reaped by its parent) counts as gone."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0]
    except OSError:
        return False
    return state not in ("Z", "X")


def fake_tool_script(state: Path) -> str:
    calls, outputs = shlex.quote(str(state / "calls")), shlex.quote(str(state / "outputs"))
    return f"""#!/bin/sh
# A fake GPU tool on the test node: records its argv (NUL-separated), prints what the test set.
tool=$(basename "$0")
printf '%s\\0' "$tool" "$@" > {calls}/"$tool.$$"
cat {outputs}/"$tool" 2>/dev/null
exit "$(cat {outputs}/"$tool.exit" 2>/dev/null || echo 0)"
"""


# The catalog runs HPL as `mpirun ... xhpl`: one rank, the program named last, is enough here.
FAKE_MPIRUN = """#!/bin/sh
for program; do :; done
exec "$program"
"""


# The loopback addresses the test sshd listens on (all of 127.0.0.0/8 is this machine's).
LOOPBACK_HOSTS = tuple(f"127.0.0.{i}" for i in range(1, 9))


@dataclass
class SshNode:
    host: str
    port: int
    user: str
    key_file: Path  # authorized on the node
    host_key_line: str  # "ssh-ed25519 AAAA..." of the node's host key
    known_hosts: Path  # lists the node's host key
    root: Path
    bin_dir: Path  # on PATH in every session (SetEnv in sshd_config)
    config: Path
    log: Path
    process: subprocess.Popen[bytes] | None = None

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    def address_of(self, index: int) -> str:
        """The sshd on another loopback address: one sshd stands for several machines, each with
        an address of its own, as an inventory must give them (one name per machine)."""
        return f"{LOOPBACK_HOSTS[index % len(LOOPBACK_HOSTS)]}:{self.port}"

    def target(self, name: str = "gpu-ssh-01", **fields: object) -> NodeTarget:
        options: dict = {"address": self.address, "user": self.user, "key_file": str(self.key_file)} | fields
        return NodeTarget(name=name, **options)

    def executor(self, **options: object) -> SshExecutor:
        """An executor that trusts this node, with no agent, fast timeouts."""
        defaults: dict = {
            "known_hosts": self.known_hosts,
            "use_agent": False,
            "connect_timeout_s": 5.0,
            "kill_grace_s": 0.5,
        }
        return SshExecutor(**(defaults | options))

    def set_tool_output(self, tool: str, text: str, exit_status: int = 0) -> None:
        (self.root / "state" / "outputs" / tool).write_text(text)
        (self.root / "state" / "outputs" / f"{tool}.exit").write_text(str(exit_status))

    def tool_calls(self, tool: str) -> list[list[str]]:
        """argv (without the tool's name) of each call of a fake tool, oldest first."""
        records = sorted((self.root / "state" / "calls").glob(f"{tool}.*"), key=lambda p: p.stat().st_mtime_ns)
        return [record.read_bytes().decode().split("\0")[1:-1] for record in records]

    def reset_tools(self) -> None:
        for directory in ("calls", "outputs"):
            shutil.rmtree(self.root / "state" / directory, ignore_errors=True)
            (self.root / "state" / directory).mkdir(parents=True)
        for tool in FAKE_TOOLS:
            fixture = FIXTURES / f"{tool}.txt"
            if fixture.exists():
                self.set_tool_output(tool, fixture.read_text())

    def accepted_logins(self) -> int:
        return self.log.read_text().count("Accepted publickey")

    def start(self) -> None:
        with self.log.open("ab") as log:
            self.process = subprocess.Popen([SSHD, "-D", "-e", "-f", str(self.config)], stdout=log, stderr=log)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                pytest.fail(f"sshd exited with {self.process.returncode}: {self.log.read_text()[-2000:]}")
            try:
                socket.create_connection((self.host, self.port), timeout=1).close()
                return
            except OSError:
                time.sleep(0.05)
        pytest.fail(f"sshd did not listen on {self.address}: {self.log.read_text()[-2000:]}")

    def stop(self) -> None:
        """Kills sshd and every connection it serves (each is a child process of it)."""
        if self.process is None:
            return
        doomed, frontier = [], [self.process.pid]
        while frontier:
            pid = frontier.pop()
            doomed.append(pid)
            frontier.extend(_children(pid))
        for pid in doomed:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        self.process.wait(timeout=10)
        self.process = None

    def restart(self) -> None:
        """Drops every connection, as a node reboot would, and listens again on the same port."""
        self.stop()
        self.start()
