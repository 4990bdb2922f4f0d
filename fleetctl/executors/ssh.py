"""Run commands on real nodes over SSH (paramiko).

Safety properties, each of which a test proves against a real OpenSSH sshd:

- Host keys are checked against a known_hosts file. Unknown keys are refused unless the
  executor was built with `accept_new_host_keys=True` (trust on first use), which appends
  the key to known_hosts and logs it. A changed key is always refused.
- argv is quoted with `shlex.join`; nothing reaches the remote shell unquoted.
- The command runs in its own remote process group. On timeout or cancellation that group
  is killed over a second channel: closing the channel alone leaves the process running.
- Output is kept in full up to a cap per stream; past the cap it is drained and dropped,
  and the result says so.
- One transport per node is reused; a global semaphore bounds the commands in flight, and
  the pool closes idle transports beyond a cap, so a sweep over thousands of nodes holds a
  bounded number of sessions.
"""

from __future__ import annotations

import fcntl
import getpass
import logging
import os
import re
import select
import shlex
import socket
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import paramiko
from paramiko.auth_strategy import AuthSource, AuthStrategy, InMemoryPrivateKey

from fleetctl.executors.base import (
    DEFAULT_OUTPUT_CAP_BYTES,
    AuthFailed,
    CommandFailed,
    CommandResult,
    CommandTimeout,
    HostKeyMismatch,
    NodeTarget,
    NodeUnreachable,
    validate_node_name,
)
from fleetctl.text import one_line

log = logging.getLogger(__name__)

# Called with ("stdout" | "stderr", chunk) as output arrives, e.g. to heartbeat a long
# check. Raising from it cancels the command (and kills the remote process group).
OutputCallback = Callable[[str, bytes], None]

# The remote side runs `exec setsid -w sh -c 'echo MARKER$$; exec "$@"' sh ARGV...`: setsid
# gives the command a process group of its own, whose id is the pid the inner sh prints
# before exec'ing the command; -w keeps setsid in the foreground so the channel's exit
# status is the command's. The marker tells that line apart from anything the login
# shell's startup files print before it.
_GROUP_MARKER = b"fleetctl-process-group="
_GROUP_WRAPPER = "exec setsid -w sh -c " + shlex.quote(f'echo "{_GROUP_MARKER.decode()}$$" && exec "$@"') + " sh"
_GROUP_LINE_RE = re.compile(re.escape(_GROUP_MARKER) + rb"(\d+)\n")
# What util-linux `setsid -w` prints (and exits with the wait status) when the command dies
# of a signal.
_SETSID_SIGNALLED_RE = re.compile(r"^setsid: child \d+ did not exit normally", re.MULTILINE)
_READ_CHUNK = 64 * 1024
# How often a waiting command re-checks its deadline when the node is silent.
_POLL_S = 0.5


@dataclass(frozen=True)
class Endpoint:
    """One SSH server as the executor reaches it."""

    user: str
    host: str
    port: int

    def __str__(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{self.user}@{host}:{self.port}"

    @property
    def known_hosts_name(self) -> str:
        """The name OpenSSH files this server's key under in known_hosts."""
        return self.host if self.port == 22 else f"[{self.host}]:{self.port}"


@dataclass(frozen=True)
class Route:
    """A node's endpoint and the bastion in front of it, if any: the pool's key."""

    node: Endpoint
    bastion: Endpoint | None = None


def parse_endpoint(address: str, *, default_user: str, default_port: int) -> Endpoint:
    """Parse "host", "host:port", "user@host:port" or "[v6addr]:port"; parts given win."""
    if address.startswith("sim://"):
        raise ValueError(f"{address!r} is a simulated node: use the sim executor")
    user, at, hostport = address.rpartition("@")
    if not at:
        user = default_user
    if hostport.startswith("["):
        host, bracket, rest = hostport[1:].partition("]")
        if not bracket or (rest and not rest.startswith(":")):
            raise ValueError(f"invalid address {address!r}: expected [ipv6]:port")
        port_text = rest[1:]
    elif hostport.count(":") == 1:
        host, _, port_text = hostport.partition(":")
    else:  # a bare name, or a bare IPv6 address
        host, port_text = hostport, ""
    if not port_text:
        port = default_port
    elif port_text.isdigit() and 0 < int(port_text) < 65536:
        port = int(port_text)
    else:
        raise ValueError(f"invalid port in address {address!r}")
    if not host or not user or host.startswith("-") or any(c.isspace() for c in host + user):
        raise ValueError(f"invalid address {address!r}: expected [user@]host[:port]")
    return Endpoint(user=user, host=host, port=port)


def remote_command(argv: Sequence[str]) -> str:
    """The exact string sent to the node's shell for argv: every word quoted."""
    if not argv:
        raise ValueError("argv is empty")
    return f"{_GROUP_WRAPPER} {shlex.join(argv)}"


class KnownHostsFile:
    """The known_hosts file: read for every connection, appended to on trust-on-first-use."""

    def __init__(self, path: Path):
        self.path = path
        self._lock = threading.Lock()

    def load_into(self, host_keys: paramiko.HostKeys) -> None:
        with self._lock:
            if self.path.exists():
                host_keys.load(str(self.path))

    def record(self, node: str, name: str, key: paramiko.PKey) -> None:
        line = paramiko.hostkeys.HostKeyEntry([name], key).to_line()
        if line is None:  # paramiko's answer for an entry without a name or a key
            raise ValueError(f"{node}: no known_hosts line for host key of {name!r}")
        with self._lock:
            self.path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
            fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
            with os.fdopen(fd, "w") as known_hosts:
                # Other fleetctl processes (workers) may append to the same file.
                fcntl.flock(known_hosts, fcntl.LOCK_EX)
                known_hosts.write(line)
        log.warning(
            "%s: trusted new host key on first use: %s %s %s, recorded in %s",
            node,
            name,
            key.get_name(),
            key.fingerprint,
            self.path,
        )


class KnownHostsPolicy(paramiko.MissingHostKeyPolicy):
    """What to do with a host key known_hosts does not list: refuse it, or record it."""

    def __init__(self, known_hosts: KnownHostsFile, node: str, accept_new: bool):
        self.known_hosts = known_hosts
        self.node = node
        self.accept_new = accept_new

    def missing_host_key(self, client: paramiko.SSHClient, hostname: str, key: paramiko.PKey) -> None:
        if not self.accept_new:
            raise HostKeyMismatch(
                self.node,
                f"unknown host key for {hostname} ({key.get_name()} {key.fingerprint}):"
                f" not in {self.known_hosts.path}; verify it and add it there, or accept new"
                " host keys explicitly (--accept-new-host-keys)",
            )
        self.known_hosts.record(self.node, hostname, key)
        client.get_host_keys().add(hostname, key.get_name(), key)


class PublicKeyAuth(AuthStrategy):
    """Public-key authentication only: the node's key file first, then the agent's keys."""

    def __init__(self, username: str, keys: Sequence[paramiko.PKey]):
        super().__init__(ssh_config=paramiko.SSHConfig())
        self.username = username
        self.keys = keys

    def get_sources(self) -> Iterator[AuthSource]:
        for key in self.keys:
            yield InMemoryPrivateKey(self.username, key)


@dataclass
class _PooledClient:
    client: paramiko.SSHClient
    users: int = 0
    last_used: float = field(default_factory=time.monotonic)

    @property
    def transport(self) -> paramiko.Transport | None:
        return self.client.get_transport()

    def is_alive(self) -> bool:
        transport = self.transport
        return transport is not None and transport.is_active()


class _StreamBuffer:
    """One output stream, kept up to the cap; later bytes are counted, not stored."""

    def __init__(self, cap: int):
        self.cap = cap
        self.data = bytearray()
        self.truncated = False

    def feed(self, chunk: bytes) -> None:
        room = self.cap - len(self.data)
        if len(chunk) > room:
            self.truncated = True
            chunk = chunk[: max(room, 0)]
        self.data += chunk

    def text(self) -> str:
        return self.data.decode("utf-8", errors="replace")


class _RemoteOutput:
    """Reads a wrapped command's channel: its process group line, then stdout and stderr."""

    def __init__(self, cap: int, on_output: OutputCallback | None):
        self.stdout = _StreamBuffer(cap)
        self.stderr = _StreamBuffer(cap)
        self.process_group: int | None = None
        self._head = b""  # stdout until the process group line is complete
        self._on_output = on_output

    def drain(self, channel: paramiko.Channel) -> None:
        while channel.recv_ready():
            self._stdout(channel.recv(_READ_CHUNK))
        while channel.recv_stderr_ready():
            chunk = channel.recv_stderr(_READ_CHUNK)
            self.stderr.feed(chunk)
            if self._on_output:
                self._on_output("stderr", chunk)

    def _stdout(self, chunk: bytes) -> None:
        if self.process_group is None:
            self._head += chunk
            match = _GROUP_LINE_RE.search(self._head)
            if not match:
                self._head = self._head[-256:]  # login-shell noise: keep only a possible partial marker
                return
            self.process_group = int(match.group(1))
            chunk, self._head = self._head[match.end() :], b""
        self.stdout.feed(chunk)
        if chunk and self._on_output:
            self._on_output("stdout", chunk)


class SshExecutor:
    """Runs commands on nodes over SSH. Thread-safe: one instance serves a whole worker."""

    def __init__(
        self,
        *,
        known_hosts: Path | str = "~/.ssh/known_hosts",
        accept_new_host_keys: bool = False,
        default_user: str | None = None,
        key_file: Path | str | None = None,
        key_passphrase: str | None = None,
        use_agent: bool = True,
        max_in_flight: int = 64,
        max_connections: int = 256,
        connect_timeout_s: float = 10.0,
        keepalive_s: float = 30.0,
        kill_grace_s: float = 5.0,
        output_cap_bytes: int = DEFAULT_OUTPUT_CAP_BYTES,
        jump_host: str | None = None,
    ):
        """
        key_file is used for nodes whose target names none; the agent (SSH_AUTH_SOCK) is
        tried after it. max_in_flight bounds concurrent commands over all nodes;
        max_connections bounds the idle transports kept for reuse. kill_grace_s is how
        long a timed-out command gets between SIGTERM and SIGKILL. jump_host
        (`[user@]host[:port]`) is the bastion for targets that name none.
        """
        self.known_hosts = KnownHostsFile(Path(known_hosts).expanduser())
        self.accept_new_host_keys = accept_new_host_keys
        self.default_user = default_user or getpass.getuser()
        self.key_file = str(key_file) if key_file else None
        self._key_passphrase = key_passphrase
        self.use_agent = use_agent
        self.max_connections = max_connections
        self.connect_timeout_s = connect_timeout_s
        self.keepalive_s = keepalive_s
        self.kill_grace_s = kill_grace_s
        self.output_cap_bytes = output_cap_bytes
        self.jump_host = jump_host
        self._in_flight = threading.BoundedSemaphore(max_in_flight)
        self._lock = threading.Lock()  # guards the pool dicts, never held while connecting
        self._pool: dict[Route, _PooledClient] = {}
        self._bastions: dict[Endpoint, _PooledClient] = {}
        self._connect_locks: dict[Route | Endpoint, threading.Lock] = {}
        self._key_cache: dict[str, paramiko.PKey] = {}

    def __repr__(self) -> str:  # never shows the passphrase
        return f"SshExecutor(known_hosts={str(self.known_hosts.path)!r}, connections={len(self._pool)})"

    def __enter__(self) -> SshExecutor:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    # -- the Executor interface ---------------------------------------------------------

    def run(
        self,
        target: NodeTarget,
        argv: Sequence[str],
        timeout_s: float,
        *,
        on_output: OutputCallback | None = None,
    ) -> CommandResult:
        """Run argv on the node; timeout_s counts from the command's start on the node.

        A non-zero exit is a result. Raises NodeUnreachable, AuthFailed, HostKeyMismatch,
        CommandTimeout or CommandFailed when nothing could be learned about the node.
        """
        validate_node_name(target.name)
        if timeout_s <= 0:
            raise ValueError(f"timeout_s must be positive, got {timeout_s}")
        command = remote_command(argv)
        route = self._route(target)
        with self._in_flight:
            pooled, channel = self._open_session(target, route)
            try:
                return self._communicate(target, tuple(argv), command, pooled, channel, timeout_s, on_output)
            finally:
                channel.close()
                self._release(route, pooled)

    def close(self) -> None:
        with self._lock:
            pooled = [*self._pool.values(), *self._bastions.values()]
            self._pool.clear()
            self._bastions.clear()
        for entry in pooled:
            entry.client.close()

    # -- routes and connections ---------------------------------------------------------

    def _route(self, target: NodeTarget) -> Route:
        user = target.user or self.default_user
        node = parse_endpoint(target.address, default_user=user, default_port=target.port)
        jump_host = target.jump_host or self.jump_host
        bastion = parse_endpoint(jump_host, default_user=user, default_port=22) if jump_host else None
        return Route(node=node, bastion=bastion)

    def open_connections(self) -> int:
        """Transports to nodes held now (in use or idle), bastions not counted."""
        with self._lock:
            return len(self._pool)

    def _open_session(self, target: NodeTarget, route: Route) -> tuple[_PooledClient, paramiko.Channel]:
        pooled = self._checkout(target, route)
        try:
            return pooled, self._session_on(target, route, pooled)
        except (paramiko.SSHException, EOFError, OSError):
            # The reused transport died after its liveness check (node rebooted, sshd
            # restarted, network blip). Nothing ran yet, so one fresh connection is safe.
            log.info("%s: connection to %s dropped, reconnecting", target.name, route.node)
        pooled = self._checkout(target, route)
        try:
            return pooled, self._session_on(target, route, pooled)
        except (paramiko.SSHException, EOFError, OSError) as error:
            raise NodeUnreachable(target.name, f"connection to {route.node} dropped: {one_line(error)}") from None

    def _session_on(self, target: NodeTarget, route: Route, pooled: _PooledClient) -> paramiko.Channel:
        """A session channel on the pooled transport; gives the transport back on failure."""
        try:
            transport = pooled.transport
            if transport is None:
                raise EOFError("transport closed")
            return transport.open_session(timeout=self.connect_timeout_s)
        except paramiko.ChannelException as refused:
            # The server is alive and said no (e.g. MaxSessions reached): not a dead link.
            self._release(route, pooled)
            raise CommandFailed(target.name, f"the node refused a session channel: {one_line(refused)}") from None
        except (paramiko.SSHException, EOFError, OSError):
            self._release(route, pooled, dead=True)
            raise
        except BaseException:
            self._release(route, pooled)
            raise

    def _checkout(self, target: NodeTarget, route: Route) -> _PooledClient:
        pooled = self._take_live(route)
        if pooled:
            return pooled
        with self._connect_lock(route):
            # Another thread may have connected while this one waited for the lock.
            pooled = self._take_live(route)
            if pooled:
                return pooled
            keys = self._keys(target)  # first: a bad key file is our fault, not the node's
            client = self._connect(target, route.node, keys, self._socket_for(target, route))
            pooled = _PooledClient(client, users=1)
            with self._lock:
                self._pool[route] = pooled
            return pooled

    def _take_live(self, route: Route) -> _PooledClient | None:
        with self._lock:
            pooled = self._pool.get(route)
            if pooled is None:
                return None
            if pooled.is_alive():
                pooled.users += 1
                return pooled
            del self._pool[route]
        log.info("reconnecting to %s: its transport was closed", route.node)
        pooled.client.close()
        return None

    def _release(self, route: Route, pooled: _PooledClient, *, dead: bool = False) -> None:
        with self._lock:
            pooled.users -= 1
            pooled.last_used = time.monotonic()
            if dead and self._pool.get(route) is pooled:
                del self._pool[route]
            idle = sorted((entry.last_used, key) for key, entry in self._pool.items() if entry.users == 0)
            surplus = [self._pool.pop(key) for _, key in idle[: max(len(self._pool) - self.max_connections, 0)]]
        if dead:
            pooled.client.close()
        for entry in surplus:
            entry.client.close()

    def _connect_lock(self, key: Route | Endpoint) -> threading.Lock:
        with self._lock:
            return self._connect_locks.setdefault(key, threading.Lock())

    def _socket_for(self, target: NodeTarget, route: Route) -> socket.socket | paramiko.Channel:
        if route.bastion is None:
            return self._tcp_connect(target, route.node)
        try:
            return self._forward(target, route)
        except (paramiko.SSHException, EOFError, OSError):
            # The pooled bastion transport died: replace it once.
            self._drop_bastion(route.bastion)
        try:
            return self._forward(target, route)
        except (paramiko.SSHException, EOFError, OSError) as error:
            self._drop_bastion(route.bastion)
            raise NodeUnreachable(
                target.name, f"bastion {route.bastion} dropped the connection: {one_line(error)}"
            ) from None

    def _forward(self, target: NodeTarget, route: Route) -> paramiko.Channel:
        """A direct-tcpip channel from the bastion to the node's SSH port."""
        assert route.bastion is not None
        transport = self._bastion(target, route.bastion).transport
        if transport is None:
            raise EOFError("bastion transport closed")
        try:
            return transport.open_channel(
                "direct-tcpip", (route.node.host, route.node.port), ("127.0.0.1", 0), timeout=self.connect_timeout_s
            )
        except paramiko.ChannelException as refused:
            raise NodeUnreachable(
                target.name,
                f"bastion {route.bastion} cannot reach {route.node.host}:{route.node.port}: {one_line(refused)}",
            ) from None

    def _drop_bastion(self, endpoint: Endpoint) -> None:
        with self._lock:
            pooled = self._bastions.pop(endpoint, None)
        if pooled:
            pooled.client.close()

    def _bastion(self, target: NodeTarget, endpoint: Endpoint) -> _PooledClient:
        with self._connect_lock(endpoint):
            with self._lock:
                pooled = self._bastions.get(endpoint)
            if pooled and pooled.is_alive():
                return pooled
            try:
                keys = self._keys(target)
                client = self._connect(target, endpoint, keys, self._tcp_connect(target, endpoint))
            except (NodeUnreachable, AuthFailed, HostKeyMismatch) as error:
                raise type(error)(target.name, f"bastion {error.message}") from None
            pooled = _PooledClient(client)
            with self._lock:
                self._bastions[endpoint] = pooled
            return pooled

    def _tcp_connect(self, target: NodeTarget, endpoint: Endpoint) -> socket.socket:
        try:
            return socket.create_connection((endpoint.host, endpoint.port), timeout=self.connect_timeout_s)
        except TimeoutError:
            reason = f"no answer within {self.connect_timeout_s:g} s"
        except OSError as error:
            reason = error.strerror or one_line(error)
        raise NodeUnreachable(target.name, f"cannot connect to {endpoint.host}:{endpoint.port}: {reason}")

    def _connect(
        self,
        target: NodeTarget,
        endpoint: Endpoint,
        keys: Sequence[paramiko.PKey],
        sock: socket.socket | paramiko.Channel,
    ) -> paramiko.SSHClient:
        """SSH handshake, host key check and login over an open socket or bastion channel."""
        client = paramiko.SSHClient()
        self.known_hosts.load_into(client.get_host_keys())
        client.set_missing_host_key_policy(KnownHostsPolicy(self.known_hosts, target.name, self.accept_new_host_keys))
        try:
            client.connect(
                endpoint.host,
                endpoint.port,
                username=endpoint.user,
                sock=sock,
                timeout=self.connect_timeout_s,
                banner_timeout=self.connect_timeout_s,
                auth_timeout=self.connect_timeout_s,
                channel_timeout=self.connect_timeout_s,
                auth_strategy=PublicKeyAuth(endpoint.user, keys),
            )
        except HostKeyMismatch:
            client.close()
            raise
        except paramiko.BadHostKeyException as changed:
            client.close()
            raise HostKeyMismatch(
                target.name,
                f"host key for {endpoint.known_hosts_name} CHANGED: the server offers"
                f" {changed.key.get_name()} {changed.key.fingerprint}, {self.known_hosts.path} has"
                f" {changed.expected_key.fingerprint}; the node was reinstalled or someone is in"
                " the middle: verify, then replace its line in known_hosts",
            ) from None
        except paramiko.AuthenticationException:
            client.close()
            offered = f"{len(keys)} key(s) offered" if keys else "no key offered (no key file, no agent keys)"
            raise AuthFailed(target.name, f"{endpoint} refused public-key login: {offered}") from None
        except (paramiko.SSHException, EOFError, OSError) as error:
            client.close()
            raise NodeUnreachable(target.name, f"SSH handshake with {endpoint} failed: {one_line(error)}") from None
        transport = client.get_transport()
        if transport is None:  # None only once the client is closed
            client.close()
            raise NodeUnreachable(target.name, f"SSH connection to {endpoint} closed as it was set up")
        transport.set_keepalive(int(self.keepalive_s))
        return client

    def _keys(self, target: NodeTarget) -> list[paramiko.PKey]:
        keys: list[paramiko.PKey] = []
        key_file = target.key_file or self.key_file
        if key_file:
            keys.append(self._load_key(target, key_file))
        if self.use_agent:
            keys.extend(paramiko.Agent().get_keys())
        return keys

    def _load_key(self, target: NodeTarget, key_file: str) -> paramiko.PKey:
        with self._lock:
            cached = self._key_cache.get(key_file)
        if cached:
            return cached
        try:
            try:
                key = paramiko.PKey.from_path(key_file)
            except TypeError:  # cryptography's way of saying the key is encrypted
                if self._key_passphrase is None:
                    raise AuthFailed(
                        target.name, f"key file {key_file} is encrypted and no passphrase was given"
                    ) from None
                # bytes, whatever paramiko's annotation says: the cryptography loaders it calls first
                # accept no str password (TypeError).
                key = paramiko.PKey.from_path(key_file, password=self._key_passphrase.encode())  # type: ignore[arg-type]
        except OSError as error:
            raise AuthFailed(target.name, f"cannot read key file {key_file}: {error.strerror}") from None
        except (paramiko.SSHException, ValueError, TypeError):
            # The library's message may quote key material; say only what is wrong.
            raise AuthFailed(
                target.name, f"cannot load key file {key_file}: wrong passphrase or not a private key"
            ) from None
        with self._lock:
            self._key_cache[key_file] = key
        return key

    # -- one command --------------------------------------------------------------------

    def _communicate(
        self,
        target: NodeTarget,
        argv: tuple[str, ...],
        command: str,
        pooled: _PooledClient,
        channel: paramiko.Channel,
        timeout_s: float,
        on_output: OutputCallback | None,
    ) -> CommandResult:
        output = _RemoteOutput(self.output_cap_bytes, on_output)
        started = time.monotonic()
        try:
            channel.exec_command(command)
        except (paramiko.SSHException, EOFError, OSError) as error:
            if not pooled.is_alive():
                raise NodeUnreachable(
                    target.name, f"connection lost while starting {argv[0]}: {one_line(error)}"
                ) from None
            raise CommandFailed(target.name, f"the node refused to run {argv[0]}: {one_line(error)}") from None
        try:
            finished = self._pump(channel, output, started + timeout_s)
        except BaseException:
            # Cancelled: an exception raised into this thread (Temporal activity
            # cancellation, Ctrl-C) or by on_output. Don't leave the command running.
            self._kill_process_group(target, pooled, output.process_group)
            raise
        if not finished:
            outcome = self._kill_process_group(target, pooled, output.process_group)
            raise CommandTimeout(target.name, f"{shlex.join(argv)} ran past its {timeout_s:g} s timeout; {outcome}")
        # Returns at once: the pump ended on the exit status or on the channel's close.
        # paramiko leaves -1 when none came: the server sent exit-signal, or the link died.
        exit_status = channel.recv_exit_status()
        if exit_status < 0 and not pooled.is_alive():
            raise NodeUnreachable(target.name, f"connection lost while {shlex.join(argv)} was running")
        if output.process_group is None:
            # The wrapper never started the command (no setsid or sh on the node?).
            stderr = output.stderr.text().strip().splitlines()
            raise CommandFailed(target.name, f"could not start {argv[0]}: {stderr[-1] if stderr else 'no output'}")
        if exit_status < 0 or _SETSID_SIGNALLED_RE.search(output.stderr.text()[-500:]):
            raise CommandFailed(target.name, f"{shlex.join(argv)} was killed by a signal")
        return CommandResult(
            argv=argv,
            exit_status=exit_status,
            stdout=output.stdout.text(),
            stderr=output.stderr.text(),
            duration_s=time.monotonic() - started,
            truncated=output.stdout.truncated or output.stderr.truncated,
            output_cap_bytes=self.output_cap_bytes,
        )

    @staticmethod
    def _pump(channel: paramiko.Channel, output: _RemoteOutput, deadline: float) -> bool:
        """Read until end of output and the exit status arrive (or the channel closes).

        False if the deadline passes first.
        """
        # The exit status can arrive before the last output: wait for both.
        while not channel.closed and not (channel.eof_received and channel.exit_status_ready()):
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return False
            if channel.eof_received:
                channel.status_event.wait(min(remaining, _POLL_S))
            else:
                select.select([channel], [], [], min(remaining, _POLL_S))
            output.drain(channel)
        output.drain(channel)
        return True

    def _kill_process_group(self, target: NodeTarget, pooled: _PooledClient, group: int | None) -> str:
        """SIGTERM the command's remote process group, SIGKILL it after the grace period."""
        if group is None:
            return "it had not started, nothing to kill"
        polls = max(int(self.kill_grace_s * 10), 1)
        script = (
            f"kill -TERM -{group} 2>/dev/null; i=0; "
            f'while kill -0 -{group} 2>/dev/null && [ "$i" -lt {polls} ]; do sleep 0.1; i=$((i + 1)); done; '
            f"kill -KILL -{group} 2>/dev/null; true"
        )
        transport = pooled.transport
        try:
            if transport is None:
                raise EOFError("transport closed")
            channel = transport.open_session(timeout=self.connect_timeout_s)
            try:
                channel.exec_command(script)
                if not channel.status_event.wait(self.kill_grace_s + self.connect_timeout_s):
                    raise TimeoutError("kill did not finish")
            finally:
                channel.close()
        except (paramiko.SSHException, EOFError, OSError) as error:
            log.warning("%s: could not kill remote process group %d: %s", target.name, group, one_line(error))
            return f"could not kill its remote process group {group}: {one_line(error)}"
        return f"killed its remote process group {group}"
