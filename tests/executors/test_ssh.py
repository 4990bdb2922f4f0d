"""The SSH executor against a real OpenSSH sshd (see conftest.py)."""

from __future__ import annotations

import logging
import shlex
import shutil
import subprocess
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from fleetctl.executors.base import (
    AuthFailed,
    CommandFailed,
    CommandTimeout,
    ExecutorError,
    HostKeyMismatch,
    NodeTarget,
    NodeUnreachable,
)
from fleetctl.executors.ssh import Endpoint, _RemoteOutput, parse_endpoint, remote_command
from tests.executors.sshd import SshNode, free_port, process_alive, write_ed25519_key
from tests.support.services import missing_service

pytestmark = pytest.mark.sshd

INJECTIONS = [
    "; rm -rf /",
    "$(touch {sentinel})",
    "`touch {sentinel}`",
    "a\ntouch {sentinel}",
    "' ; touch {sentinel} ; '",
    '" ; touch {sentinel} ; "',
    "| touch {sentinel}",
    "&& touch {sentinel}",
    "> {sentinel}",
    "*",
    "",
    "--format=csv,noheader",
]


def assert_one_line_naming(error: ExecutorError, node: str) -> None:
    assert str(error).startswith(f"{node}: ")
    assert "\n" not in str(error)


def wait_until_gone(pids: list[int], within_s: float = 3.0) -> list[int]:
    deadline = time.monotonic() + within_s
    while (alive := [pid for pid in pids if process_alive(pid)]) and time.monotonic() < deadline:
        time.sleep(0.05)
    return alive


# -- running commands ----------------------------------------------------------------------


def test_returns_stdout_stderr_and_exit_status(ssh_node: SshNode) -> None:
    with ssh_node.executor() as executor:
        result = executor.run(ssh_node.target(), ["sh", "-c", "echo out; echo err >&2; exit 3"], timeout_s=10)
    assert (result.exit_status, result.stdout, result.stderr) == (3, "out\n", "err\n")
    assert result.argv == ("sh", "-c", "echo out; echo err >&2; exit 3")
    assert not result.truncated and result.duration_s < 10


def test_fake_tools_are_on_the_nodes_path(ssh_node: SshNode) -> None:
    ssh_node.set_tool_output("dcgmi", "fake dcgmi output\n", exit_status=4)
    with ssh_node.executor() as executor:
        result = executor.run(ssh_node.target(), ["dcgmi", "diag", "-r", "1", "-j"], timeout_s=10)
    assert (result.exit_status, result.stdout) == (4, "fake dcgmi output\n")
    assert ssh_node.tool_calls("dcgmi") == [["diag", "-r", "1", "-j"]]


@pytest.mark.parametrize("word", INJECTIONS)
def test_every_argv_word_reaches_the_node_verbatim(ssh_node: SshNode, tmp_path: Path, word: str) -> None:
    sentinel = tmp_path / "injected"
    argv = ["nvidia-smi", "-i", word.format(sentinel=sentinel), "-q"]
    with ssh_node.executor() as executor:
        result = executor.run(ssh_node.target(), argv, timeout_s=10)
    assert result.exit_status == 0
    assert ssh_node.tool_calls("nvidia-smi") == [argv[1:]]
    assert not sentinel.exists()


@pytest.mark.parametrize("word", INJECTIONS)
def test_remote_command_quotes_every_word(word: str) -> None:
    argv = ["dcgmi", "diag", word]
    words = shlex.split(remote_command(argv))
    assert words[-len(argv) :] == argv
    assert remote_command(argv).endswith(shlex.join(argv))


def test_empty_argv_is_refused() -> None:
    with pytest.raises(ValueError, match="argv is empty"):
        remote_command([])


@pytest.mark.parametrize("name", ["gpu-01; rm -rf /", "gpu-01\n", "$(reboot)", "`id`", "-oProxyCommand=x", ""])
def test_invalid_node_name_is_refused_before_connecting(ssh_node: SshNode, name: str) -> None:
    with ssh_node.executor() as executor, pytest.raises(ValueError, match="invalid node name"):
        executor.run(ssh_node.target(name=name), ["true"], timeout_s=5)
    assert executor.open_connections() == 0


def test_command_not_found_is_a_result_not_an_error(ssh_node: SshNode) -> None:
    with ssh_node.executor() as executor:
        result = executor.run(ssh_node.target(), ["no-such-tool"], timeout_s=10)
    assert result.exit_status == 127 and "not found" in result.stderr


def test_command_killed_by_a_signal_is_command_failed(ssh_node: SshNode) -> None:
    with ssh_node.executor() as executor, pytest.raises(CommandFailed, match="killed by a signal") as caught:
        executor.run(ssh_node.target(), ["sh", "-c", "kill -KILL $$"], timeout_s=10)
    assert_one_line_naming(caught.value, "gpu-ssh-01")


def test_output_beyond_the_cap_is_dropped_and_recorded(ssh_node: SshNode) -> None:
    with ssh_node.executor(output_cap_bytes=10_000) as executor:
        result = executor.run(
            ssh_node.target(), ["sh", "-c", "head -c 300000 /dev/zero | tr '\\0' x; echo done >&2"], timeout_s=20
        )
    # The command was drained to its end (not blocked on a full window) and exited cleanly.
    assert result.exit_status == 0 and result.stderr == "done\n"
    assert result.stdout == "x" * 10_000
    assert result.truncated and result.output_cap_bytes == 10_000


def test_output_streams_to_the_callback_as_it_arrives(ssh_node: SshNode) -> None:
    chunks: list[tuple[str, bytes, float]] = []
    with ssh_node.executor() as executor:
        result = executor.run(
            ssh_node.target(),
            ["sh", "-c", "echo first; echo oops >&2; sleep 1; echo second"],
            timeout_s=10,
            on_output=lambda stream, chunk: chunks.append((stream, chunk, time.monotonic())),
        )
    assert b"".join(chunk for stream, chunk, _ in chunks if stream == "stdout") == b"first\nsecond\n"
    assert b"".join(chunk for stream, chunk, _ in chunks if stream == "stderr") == b"oops\n"
    first = next(at for _, chunk, at in chunks if chunk.startswith(b"first"))
    second = next(at for _, chunk, at in chunks if b"second" in chunk)
    assert second - first > 0.5  # the first line came before the command ended
    assert result.stdout == "first\nsecond\n"


# -- timeout and cancellation kill the remote process ------------------------------------


def spawn_tree_argv(pid_file: Path) -> list[str]:
    """A shell with a background child, both recording their pids, then waiting forever."""
    return ["sh", "-c", f"sleep 300 & echo $! > {pid_file}; echo $$ >> {pid_file}; echo started; wait"]


def read_pids(pid_file: Path) -> list[int]:
    return [int(line) for line in pid_file.read_text().split()]


def test_timeout_kills_the_remote_process_group(ssh_node: SshNode, tmp_path: Path) -> None:
    pid_file = tmp_path / "pids"
    with ssh_node.executor() as executor:
        started = time.monotonic()
        # Long enough for the remote tree to start and write its pids on a loaded CI machine.
        with pytest.raises(CommandTimeout) as caught:
            executor.run(ssh_node.target(), spawn_tree_argv(pid_file), timeout_s=4)
        assert time.monotonic() - started < 12
        pids = read_pids(pid_file)
        assert len(pids) == 2
        assert wait_until_gone(pids) == []
        assert "killed its remote process group" in str(caught.value)
        assert_one_line_naming(caught.value, "gpu-ssh-01")
        # The connection is still good for the next command.
        assert executor.run(ssh_node.target(), ["true"], timeout_s=10).exit_status == 0


def test_cancellation_kills_the_remote_process_group(ssh_node: SshNode, tmp_path: Path) -> None:
    class Cancelled(Exception):
        pass

    def cancel_on_first_output(stream: str, chunk: bytes) -> None:
        raise Cancelled()

    pid_file = tmp_path / "pids"
    with ssh_node.executor() as executor, pytest.raises(Cancelled):
        executor.run(ssh_node.target(), spawn_tree_argv(pid_file), timeout_s=60, on_output=cancel_on_first_output)
    assert wait_until_gone(read_pids(pid_file)) == []


# -- host keys ----------------------------------------------------------------------------


def test_unknown_host_key_is_refused_by_default(ssh_node: SshNode, tmp_path: Path) -> None:
    known_hosts = tmp_path / "known_hosts"
    with ssh_node.executor(known_hosts=known_hosts) as executor, pytest.raises(HostKeyMismatch) as caught:
        executor.run(ssh_node.target(), ["true"], timeout_s=10)
    assert "unknown host key" in str(caught.value) and "--accept-new-host-keys" in str(caught.value)
    assert_one_line_naming(caught.value, "gpu-ssh-01")
    assert not known_hosts.exists()


def test_new_host_key_is_accepted_and_recorded_when_asked(
    ssh_node: SshNode, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    known_hosts = tmp_path / "ssh" / "known_hosts"
    with (
        caplog.at_level(logging.WARNING, logger="fleetctl.executors.ssh"),
        ssh_node.executor(known_hosts=known_hosts, accept_new_host_keys=True) as executor,
    ):
        assert executor.run(ssh_node.target(), ["true"], timeout_s=10).exit_status == 0
    assert known_hosts.read_text() == f"[127.0.0.1]:{ssh_node.port} {ssh_node.host_key_line}\n"
    assert "trusted new host key on first use" in caplog.text and "gpu-ssh-01" in caplog.text
    # Recorded means trusted from now on, also without accept_new_host_keys.
    with ssh_node.executor(known_hosts=known_hosts) as executor:
        assert executor.run(ssh_node.target(), ["true"], timeout_s=10).exit_status == 0


@pytest.mark.parametrize("accept_new", [False, True])
def test_changed_host_key_is_always_refused(ssh_node: SshNode, tmp_path: Path, accept_new: bool) -> None:
    impostor = write_ed25519_key(tmp_path / "other_host_key")
    known_hosts = tmp_path / "known_hosts"
    known_hosts.write_text(f"[127.0.0.1]:{ssh_node.port} {impostor}\n")
    with (
        ssh_node.executor(known_hosts=known_hosts, accept_new_host_keys=accept_new) as executor,
        pytest.raises(HostKeyMismatch, match="CHANGED") as caught,
    ):
        executor.run(ssh_node.target(), ["true"], timeout_s=10)
    assert_one_line_naming(caught.value, "gpu-ssh-01")
    assert known_hosts.read_text() == f"[127.0.0.1]:{ssh_node.port} {impostor}\n"


# -- authentication -------------------------------------------------------------------------


def test_key_the_node_does_not_know_is_auth_failed(ssh_node: SshNode, tmp_path: Path) -> None:
    write_ed25519_key(tmp_path / "stranger")
    with ssh_node.executor() as executor, pytest.raises(AuthFailed) as caught:
        executor.run(ssh_node.target(key_file=str(tmp_path / "stranger")), ["true"], timeout_s=10)
    assert not isinstance(caught.value, NodeUnreachable)
    assert caught.value.kind == "auth_failed"
    assert_one_line_naming(caught.value, "gpu-ssh-01")


def test_wrong_passphrase_is_auth_failed_and_never_shown(ssh_node: SshNode, tmp_path: Path) -> None:
    write_ed25519_key(tmp_path / "locked", passphrase=b"the-right-one")
    secret = "hunter2-wrong-passphrase"
    executor = ssh_node.executor(key_passphrase=secret)
    with executor, pytest.raises(AuthFailed, match="wrong passphrase") as caught:
        executor.run(ssh_node.target(key_file=str(tmp_path / "locked")), ["true"], timeout_s=10)
    assert secret not in str(caught.value) and secret not in repr(executor)
    assert_one_line_naming(caught.value, "gpu-ssh-01")


def test_encrypted_key_opens_with_its_passphrase(ssh_node: SshNode, tmp_path: Path) -> None:
    public = write_ed25519_key(tmp_path / "locked", passphrase=b"s3cret")
    authorized = ssh_node.root / "authorized_keys"
    original = authorized.read_text()
    authorized.write_text(original + public + "\n")
    try:
        with ssh_node.executor(key_passphrase="s3cret") as executor:
            result = executor.run(ssh_node.target(key_file=str(tmp_path / "locked")), ["true"], timeout_s=10)
        assert result.exit_status == 0
    finally:
        authorized.write_text(original)


def test_missing_key_file_is_auth_failed(ssh_node: SshNode, tmp_path: Path) -> None:
    with ssh_node.executor() as executor, pytest.raises(AuthFailed, match="cannot read key file"):
        executor.run(ssh_node.target(key_file=str(tmp_path / "absent")), ["true"], timeout_s=10)


def test_executor_key_file_serves_nodes_that_name_none(ssh_node: SshNode) -> None:
    with ssh_node.executor(key_file=ssh_node.key_file) as executor:
        assert executor.run(ssh_node.target(key_file=None), ["true"], timeout_s=10).exit_status == 0


# -- reachability, pooling and concurrency -------------------------------------------------


def test_closed_port_is_node_unreachable_fast() -> None:
    from fleetctl.executors.ssh import SshExecutor

    target = NodeTarget(name="gpu-down-01", address=f"127.0.0.1:{free_port()}", user="root")
    started = time.monotonic()
    with SshExecutor(use_agent=False) as executor, pytest.raises(NodeUnreachable) as caught:
        executor.run(target, ["true"], timeout_s=10)
    assert time.monotonic() - started < 2
    assert caught.value.kind == "unreachable" and not isinstance(caught.value, CommandFailed)
    assert "cannot connect to 127.0.0.1" in str(caught.value)
    assert_one_line_naming(caught.value, "gpu-down-01")


def test_concurrency_limit_and_one_transport_per_node(ssh_node: SshNode, tmp_path: Path) -> None:
    running = tmp_path / "running"
    running.mkdir()
    counts = tmp_path / "counts"
    # Each command marks itself running, waits (a while at most) for company so that
    # commands allowed to overlap do, records how many are running, and leaves.
    probe = [
        "sh",
        "-c",
        f"touch {running}/$$; i=0; "
        f'while [ "$(ls {running} | wc -l)" -lt 3 ] && [ $i -lt 15 ]; do sleep 0.1; i=$((i + 1)); done; '
        f"sleep 0.1; ls {running} | wc -l >> {counts}; rm {running}/$$",
    ]
    logins_before = ssh_node.accepted_logins()
    with ssh_node.executor(max_in_flight=3) as executor, ThreadPoolExecutor(max_workers=9) as pool:
        results = list(pool.map(lambda _: executor.run(ssh_node.target(), probe, timeout_s=20), range(9)))
        assert executor.open_connections() == 1
    assert [result.exit_status for result in results] == [0] * 9
    assert max(int(line) for line in counts.read_text().split()) == 3
    assert ssh_node.accepted_logins() - logins_before == 1


def test_idle_connections_beyond_the_cap_are_closed(ssh_node: SshNode, tmp_path: Path) -> None:
    known_hosts = tmp_path / "known_hosts"
    known_hosts.write_text(ssh_node.known_hosts.read_text() + f"[localhost]:{ssh_node.port} {ssh_node.host_key_line}\n")
    with ssh_node.executor(known_hosts=known_hosts, max_connections=1) as executor:
        executor.run(ssh_node.target(name="gpu-a"), ["true"], timeout_s=10)
        executor.run(ssh_node.target(name="gpu-b", address=f"localhost:{ssh_node.port}"), ["true"], timeout_s=10)
        assert executor.open_connections() == 1


def test_dropped_connection_is_replaced_once_transparently(ssh_node: SshNode) -> None:
    with ssh_node.executor() as executor:
        assert executor.run(ssh_node.target(), ["true"], timeout_s=10).exit_status == 0
        logins_before = ssh_node.accepted_logins()
        ssh_node.restart()  # every connection dropped, as a node reboot would
        assert executor.run(ssh_node.target(), ["echo", "back"], timeout_s=10).stdout == "back\n"
        assert ssh_node.accepted_logins() - logins_before == 1
        assert executor.open_connections() == 1


def test_connection_lost_mid_command_is_node_unreachable(ssh_node: SshNode) -> None:
    with ssh_node.executor() as executor:
        restarter = threading.Timer(0.5, ssh_node.restart)
        restarter.start()
        try:
            with pytest.raises(NodeUnreachable, match="connection lost while sleep 30 was running"):
                executor.run(ssh_node.target(), ["sleep", "30"], timeout_s=20)
        finally:
            restarter.join()


# -- jump host ------------------------------------------------------------------------------


def test_runs_through_a_jump_host(ssh_node: SshNode) -> None:
    # The same sshd serves as bastion and node: two logins, the second over direct-tcpip.
    target = ssh_node.target(jump_host=f"{ssh_node.user}@{ssh_node.address}")
    logins_before = ssh_node.accepted_logins()
    with ssh_node.executor() as executor:
        result = executor.run(target, ["sh", "-c", "echo $SSH_CONNECTION"], timeout_s=10)
        executor.run(target, ["true"], timeout_s=10)
    assert result.exit_status == 0 and result.stdout.startswith("127.0.0.1 ")
    assert ssh_node.accepted_logins() - logins_before == 2


def test_node_the_bastion_cannot_reach_is_node_unreachable(ssh_node: SshNode) -> None:
    target = ssh_node.target(address=f"127.0.0.1:{free_port()}", jump_host=f"{ssh_node.user}@{ssh_node.address}")
    with ssh_node.executor() as executor, pytest.raises(NodeUnreachable, match=r"bastion .* cannot reach") as caught:
        executor.run(target, ["true"], timeout_s=10)
    assert_one_line_naming(caught.value, "gpu-ssh-01")


# -- addresses ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("address", "expected"),
    [
        ("gpu-01", Endpoint("ops", "gpu-01", 22)),
        ("gpu-01:2222", Endpoint("ops", "gpu-01", 2222)),
        ("admin@10.0.0.7:2200", Endpoint("admin", "10.0.0.7", 2200)),
        ("[fd00::7]:2200", Endpoint("ops", "fd00::7", 2200)),
        ("fd00::7", Endpoint("ops", "fd00::7", 22)),
    ],
)
def test_parse_endpoint(address: str, expected: Endpoint) -> None:
    assert parse_endpoint(address, default_user="ops", default_port=22) == expected


@pytest.mark.parametrize(
    "address", ["sim://gpu-01", "gpu-01:0", "gpu-01:ssh", "-oProxyCommand=x", "@gpu", "a b", "[::1"]
)
def test_parse_endpoint_refuses(address: str) -> None:
    with pytest.raises(ValueError):
        parse_endpoint(address, default_user="ops", default_port=22)


def test_known_hosts_name_follows_openssh() -> None:
    assert Endpoint("u", "gpu-01", 22).known_hosts_name == "gpu-01"
    assert Endpoint("u", "gpu-01", 2222).known_hosts_name == "[gpu-01]:2222"


def test_agent_keys_authenticate(ssh_node: SshNode, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    agent_bin, add_bin = shutil.which("ssh-agent"), shutil.which("ssh-add")
    if not (agent_bin and add_bin):
        missing_service("ssh-agent / ssh-add", "not installed (Debian: openssh-client)")
    socket_path = tmp_path / "agent.sock"
    agent = subprocess.Popen([agent_bin, "-D", "-a", str(socket_path)], stdout=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 5
        while not socket_path.exists() and time.monotonic() < deadline:
            time.sleep(0.02)
        monkeypatch.setenv("SSH_AUTH_SOCK", str(socket_path))
        subprocess.run([add_bin, "-q", str(ssh_node.key_file)], check=True, capture_output=True)
        with ssh_node.executor(use_agent=True) as executor:
            result = executor.run(ssh_node.target(key_file=None), ["true"], timeout_s=10)
        assert result.exit_status == 0
    finally:
        agent.terminate()
        agent.wait()


def test_timeout_must_be_positive(ssh_node: SshNode) -> None:
    with ssh_node.executor() as executor, pytest.raises(ValueError, match="timeout_s must be positive"):
        executor.run(ssh_node.target(), ["true"], timeout_s=0)


class ScriptedChannel:
    """Just enough of a paramiko Channel for _RemoteOutput: stdout arrives in these chunks."""

    def __init__(self, chunks: list[bytes]):
        self.chunks = chunks

    def recv_ready(self) -> bool:
        return bool(self.chunks)

    def recv(self, size: int) -> bytes:
        return self.chunks.pop(0)

    def recv_stderr_ready(self) -> bool:
        return False


def test_login_shell_noise_before_the_process_group_line_is_dropped() -> None:
    output = _RemoteOutput(cap=1000, on_output=None)
    # Startup files that print, and the marker split across chunks.
    output.drain(ScriptedChannel([b"Welcome to gpu-01\n" * 100, b"fleetctl-process-gr", b"oup=4242\nreal output\n"]))  # type: ignore[arg-type]
    assert output.process_group == 4242
    assert output.stdout.text() == "real output\n"
