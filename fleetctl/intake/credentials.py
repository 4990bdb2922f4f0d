"""Who may speak to the intake, and for which nodes.

Two kinds of credential, both sent as `Authorization: Bearer ...`:
    the operator token   --token-file / FLEETCTL_INTAKE_TOKEN: Alertmanager, people, tools;
                         events and heartbeats for any node
    an agent credential  `fleetctl events credential issue NODE`: that node's heartbeats and
                         events only (a stolen agent cannot drain another node, nor hide
                         another node's silent agent)

Agent credentials are kept as SHA-256 hashes in a file (one "NODE HASH" line a node), never
in clear: the intake reloads the file when it changes, so issuing or revoking needs no
restart. SHA-256 and no salt or slow hash: a credential is 256 random bits, so there is no
dictionary to search; a slow hash protects guessable passwords, and would cost every
heartbeat its time.
"""

from __future__ import annotations

import hashlib
import hmac
import logging
import os
import re
import secrets
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from fleetctl.inventory.names import NODE_NAME_RE

MAX_TOKEN = 4096  # characters; a header line longer than this is no credential anyone means
CREDENTIAL_PREFIX = "fleetctl-agent_"
_HASH_LINE = re.compile(r"(?P<node>\S+) (?P<hash>[0-9a-f]{64})\Z")
log = logging.getLogger("fleetctl.intake")

RELOAD_CHECK_S = 1.0  # how often at most the hash file's modification time is looked at


class BadCredentials(ValueError):
    """A token file or a hash file that cannot be used; the message is one line."""


def read_token(raw: bytes, where: str) -> str:
    """A token file's contents: one line of printable ASCII without spaces, at most MAX_TOKEN
    characters (a final newline is allowed). Anything else is BadCredentials naming `where`:
    a token with a stray byte would be sent as something the intake never matches."""
    text = raw[:-1] if raw.endswith(b"\n") else raw
    text = text[:-1] if text.endswith(b"\r") else text
    if not text:
        raise BadCredentials(f"{where}: the bearer token is empty")
    if len(text) > MAX_TOKEN:
        raise BadCredentials(f"{where}: the bearer token is longer than {MAX_TOKEN} characters")
    if b"\n" in text:
        raise BadCredentials(f"{where}: the bearer token must be one line")
    if not all(0x21 <= byte <= 0x7E for byte in text):
        raise BadCredentials(f"{where}: the bearer token must be printable ASCII without spaces")
    return text.decode("ascii")


def token_hash(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def new_credential() -> str:
    return CREDENTIAL_PREFIX + secrets.token_urlsafe(32)


def parse_hashes(text: str, where: str) -> dict[str, str]:
    """{hash: node} of a hash file: "NODE HASH" lines, blank lines and # comments ignored.
    One credential a node: a node named twice is refused, so a revocation cannot miss one."""
    by_hash: dict[str, str] = {}
    nodes: set[str] = set()
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip() or line.startswith("#"):
            continue
        match = _HASH_LINE.match(line)
        if not match or not NODE_NAME_RE.match(match["node"]):
            raise BadCredentials(f"{where}:{number}: expected 'NODE SHA256' (64 hex digits)")
        if match["node"] in nodes:
            raise BadCredentials(f"{where}:{number}: {match['node']} has a credential already")
        nodes.add(match["node"])
        by_hash[match["hash"]] = match["node"]
    return by_hash


def with_credential(text: str, node: str, digest: str | None) -> str:
    """The hash file `text` with `node`'s line replaced by `digest` (None: removed)."""
    lines = [line for line in text.splitlines() if line.split(" ", 1)[0] != node] + (
        [f"{node} {digest}"] if digest else []
    )
    return "".join(f"{line}\n" for line in lines)


@dataclass(frozen=True)
class Caller:
    """Who a request comes from: a node's agent (`node`), or the operator (node None)."""

    node: str | None

    def may_speak_for(self, node: str) -> bool:
        return self.node is None or self.node == node

    @property
    def key(self) -> str:
        """The credential's name where the intake bounds and counts what it queued."""
        return "operator" if self.node is None else f"agent:{self.node}"


OPERATOR = Caller(None)


class Credentials:
    """Thread-safe. The operator token in memory, the agents' hashes from `hash_file` (None:
    no agent credentials), reread when its modification time changes."""

    def __init__(
        self, operator_token: str, hash_file: Path | None = None, operator_granted: Callable[[], bool] | None = None
    ):
        self._operator = f"Bearer {operator_token}".encode()
        # The operator token is a subject of the roles file like any other (`events serve
        # --roles`): asked at each request, so revoking its role shuts it out without a restart.
        self._operator_granted = operator_granted
        self.hash_file = hash_file
        self._lock = threading.Lock()
        self._by_hash: dict[str, str] = {}
        self._stamp: tuple[int, int, int] | None = None
        self._checked = 0.0
        if hash_file is not None:
            self._reload(hash_file, force=True)

    def caller(self, authorization: str) -> Caller | None:
        """The caller an Authorization header names, or None: no credential we know."""
        if hmac.compare_digest(authorization.encode(errors="replace"), self._operator):
            return OPERATOR if self._operator_granted is None or self._operator_granted() else None
        scheme, _, token = authorization.partition(" ")
        if self.hash_file is None or scheme != "Bearer" or not token or len(token) > MAX_TOKEN:
            return None
        self._reload(self.hash_file)
        node = self._by_hash.get(token_hash(token))
        return Caller(node) if node else None

    def _reload(self, hash_file: Path, force: bool = False) -> None:
        """Reread the hash file (`hash_file`: self.hash_file, known to be set) when it changed.
        A file that became unreadable or malformed keeps the credentials last read (and says so
        once): a typo while revoking must not lock every agent out; only a valid file changes
        who may speak. A file removed revokes every agent credential: deleting it is how a
        site takes them all back, and what is gone cannot still grant."""
        now = time.monotonic()
        with self._lock:
            if not force and now - self._checked < RELOAD_CHECK_S:
                return
            self._checked = now
            try:
                stat = os.stat(hash_file)
                stamp = (stat.st_ino, stat.st_mtime_ns, stat.st_size)
                if stamp == self._stamp:
                    return
                by_hash = parse_hashes(hash_file.read_text(encoding="ascii"), str(hash_file))
            except FileNotFoundError:
                if force:
                    raise BadCredentials(f"{hash_file}: no such file") from None
                if self._by_hash:
                    log.warning("%s was removed: every agent credential is revoked", hash_file)
                self._by_hash, self._stamp = {}, None
                return
            except (OSError, UnicodeDecodeError, BadCredentials) as exc:
                if force:
                    raise BadCredentials(_reason(hash_file, exc)) from None
                if self._stamp is not None:
                    log.warning("%s (the credentials read before still hold)", _reason(hash_file, exc))
                    self._stamp = None  # said once; a good file is read again
                return
            self._by_hash, self._stamp = by_hash, stamp


def _reason(path: Path, exc: Exception) -> str:
    if isinstance(exc, BadCredentials):
        return str(exc)
    if isinstance(exc, UnicodeDecodeError):
        return f"{path}: not ASCII"
    return f"{path}: {getattr(exc, 'strerror', None) or exc}"
