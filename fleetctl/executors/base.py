"""The one interface every executor implements, and the errors it may raise.

An executor error means fleetctl could not learn anything about the node (it could not
reach it, log in, or the command ran past its time). Callers must never count one as a
failed hardware check: it becomes an `error` result and is retried.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from fleetctl.inventory.names import LABEL_KEY_RE, LABEL_VALUE_RE, NODE_NAME_RE

DEFAULT_OUTPUT_CAP_BYTES = 8 * 1024 * 1024


@dataclass(frozen=True)
class NodeTarget:
    """Where and how to reach one node; built from its inventory entry."""

    name: str
    address: str  # "sim://NAME", "host", "host:port", or "user@host:port"
    user: str | None = None
    port: int = 22
    jump_host: str | None = None  # "user@bastion:port"
    key_file: str | None = None
    # The GPU profile from the inventory. The SSH executor does not need it; a simulated
    # node renders its tools from it and refuses a target without one.
    profile: str | None = None


@dataclass(frozen=True)
class CommandResult:
    argv: tuple[str, ...]
    exit_status: int
    stdout: str
    stderr: str
    duration_s: float
    # True when stdout or stderr was cut at the output cap; the record keeps the cap.
    truncated: bool = False
    output_cap_bytes: int = DEFAULT_OUTPUT_CAP_BYTES


class ExecutorError(Exception):
    """Base of every 'could not run it' error. `kind` is stable and machine readable."""

    kind = "executor"

    def __init__(self, node: str, message: str):
        super().__init__(f"{node}: {message}")
        self.node = node
        self.message = message


class NodeUnreachable(ExecutorError):
    kind = "unreachable"


class AuthFailed(ExecutorError):
    kind = "auth_failed"


class HostKeyMismatch(ExecutorError):
    """The node's host key is unknown or differs from known_hosts."""

    kind = "host_key"


class CommandTimeout(ExecutorError):
    kind = "timeout"


class CommandFailed(ExecutorError):
    """The command could not be started or was killed (not: it exited non-zero)."""

    kind = "command_failed"


class Executor(Protocol):
    def run(self, target: NodeTarget, argv: Sequence[str], timeout_s: float) -> CommandResult:
        """Run argv on the node. Non-zero exit is a result, not an exception."""
        ...

    def close(self) -> None: ...


def validate_node_name(name: str) -> str:
    if not isinstance(name, str) or not NODE_NAME_RE.match(name):
        raise ValueError(f"invalid node name {name!r}: use letters, digits, '.', '_' or '-', at most 63 characters")
    return name


def validate_label(key: str, value: str) -> tuple[str, str]:
    """A node label as Kubernetes accepts it: `[prefix/]name` = value (value may be empty)."""
    if not isinstance(key, str) or not LABEL_KEY_RE.match(key):
        raise ValueError(
            f"invalid label key {key!r}: use an optional DNS prefix and '/', then letters, digits,"
            " '.', '_' or '-' (at most 63 characters, alphanumeric at both ends)"
        )
    if not isinstance(value, str) or not LABEL_VALUE_RE.match(value):
        raise ValueError(
            f"invalid label value {value!r} for {key}: use letters, digits, '.', '_' or '-'"
            " (at most 63 characters, alphanumeric at both ends)"
        )
    return key, value
