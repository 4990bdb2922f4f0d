"""Roles and the roles file the admin keeps: which role each subject (or identity-provider
group) holds in each fleet. A subject never names its own role; the front door looks it up
here for the subject the certificate or token proved.

    subjects:
      alice: {"*": operator, gpu-east: admin}   # every fleet: operator; gpu-east: admin
      bob: viewer                               # shorthand for {"*": viewer}
    groups:                                     # an OIDC token's groups claim
      sre: {"*": operator}

A fleet's own entry overrides "*" (an admin elsewhere can be a viewer in one fleet); a
subject's role and its groups' roles together give the highest of them. The file is read
strictly: an unknown role, key or fleet name, or a key written twice, is refused in one line.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path
from typing import Any

import yaml

from fleetctl.checks.safe_yaml import YamlRefused, loads, read_text

ANY_FLEET = "*"
# A subject is an operator's name as fleetctl records it: name or name@where (an e-mail
# address, a certificate's common name); ':' and '/' belong to automation's actors.
SUBJECT_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}(@[A-Za-z0-9][A-Za-z0-9._-]{0,127})?\Z")
_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}\Z")
# The actors automation records that a subject could spell (no ':' or '/'): a person named
# one of these would be recorded as automation, and the report counts automation's drains
# apart from operators'. The workflows' own names (fleetctl/, workflows/), and the job gate's
# and agents' `prolog@JOB`, `epilog@JOB`, `fleetctl-agent@NODE`.
AUTOMATION_ACTORS = frozenset(
    {
        "lifecycle",
        "reachability",
        "agent-silence",
        "active-checks",
        "job-sync",
        "production-stragglers",
        "hung-jobs",
        "validate",
        "drain",
        "demo",
        "fleetctl",
        "fleetctl-agent",
        "prolog",
        "epilog",
        "schedule",
        "gpu-returns",
    }
)


def automation_actor(subject: str) -> bool:
    """Whether `subject` is (or, before its '@' or '/', names) an actor automation records
    (`schedule/nightly`, `prolog@node`)."""
    return re.split(r"[@/]", subject, maxsplit=1)[0].lower() in AUTOMATION_ACTORS


_SECTIONS = ("subjects", "groups")


class RolesError(ValueError):
    """A roles file fleetctl refuses; the message is one line naming where and why."""


class Role(str, Enum):
    """What a subject may do in a fleet, each role everything the one before it may do."""

    VIEWER = "viewer"
    OPERATOR = "operator"
    ADMIN = "admin"

    @property
    def rank(self) -> int:
        return list(Role).index(self)

    def covers(self, needed: Role) -> bool:
        return self.rank >= needed.rank


@dataclass(frozen=True)
class RolesFile:
    """{subject: {fleet or "*": role}} and the same for groups."""

    subjects: Mapping[str, Mapping[str, Role]] = field(default_factory=dict)
    groups: Mapping[str, Mapping[str, Role]] = field(default_factory=dict)

    def role_of(self, subject: str, fleet: str, groups: Iterable[str] = ()) -> Role | None:
        """The highest role `subject` holds in `fleet` itself or through one of `groups`; None:
        none (the subject may do nothing there, not even read through the front door)."""
        held = [_in_fleet(self.subjects.get(subject, {}), fleet)]
        held += [_in_fleet(self.groups.get(group, {}), fleet) for group in groups]
        roles = [role for role in held if role is not None]
        return max(roles, key=lambda role: role.rank) if roles else None

    def fleets_of(self, subject: str, groups: Iterable[str] = ()) -> dict[str, Role]:
        """{fleet or "*": role} for every fleet the subject or its groups are named in."""
        groups = list(groups)
        named = set(self.subjects.get(subject, {}))
        for group in groups:
            named |= set(self.groups.get(group, {}))
        roles = {fleet: self.role_of(subject, fleet, groups) for fleet in sorted(named)}
        return {fleet: role for fleet, role in roles.items() if role is not None}


def _in_fleet(entry: Mapping[str, Role], fleet: str) -> Role | None:
    return entry.get(fleet, entry.get(ANY_FLEET))


class RolesWatch:
    """The roles file at `path`, read again when it changes, so that granting or revoking needs
    no restart. A file that became unreadable or invalid raises RolesError: whoever asks
    refuses what it would have allowed, never falls back to an older grant."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self._read: tuple[tuple[int, int], RolesFile] | None = None
        self.current()

    def current(self) -> RolesFile:
        try:
            stat = self.path.stat()
        except OSError as exc:
            raise RolesError(f"{self.path}: cannot read ({exc.strerror})") from None
        stamp = (stat.st_mtime_ns, stat.st_size)
        if self._read is None or self._read[0] != stamp:
            self._read = (stamp, load_roles(self.path))
        return self._read[1]

    def grants(self, subject: str, fleet: str, needed: Role) -> bool:
        """Whether `subject` holds `needed` (or above) in `fleet` now; False when the file is refused."""
        try:
            held = self.current().role_of(subject, fleet)
        except RolesError:
            return False
        return held is not None and held.covers(needed)


def load_roles(path: str | Path) -> RolesFile:
    """The roles file at `path`; RolesError (one line) if it cannot be read or is refused."""
    try:
        text = read_text(path)
    except YamlRefused as exc:
        raise RolesError(str(exc)) from None
    return parse_roles(text, str(path))


def parse_roles(text: str, where: str = "roles") -> RolesFile:
    try:
        raw = loads(text, where)  # first: it refuses aliases, which the walk below would follow
        _refuse_duplicate_keys(text, where)
    except YamlRefused as exc:
        raise RolesError(str(exc)) from None
    if raw is None:
        return RolesFile()
    if not isinstance(raw, dict):
        raise RolesError(f"{where}: expected a mapping with 'subjects' and 'groups'")
    if unknown := sorted(str(key) for key in raw if key not in _SECTIONS):
        raise RolesError(f"{where}: unknown key {unknown[0]!r} (expected {' or '.join(_SECTIONS)})")
    return RolesFile(
        subjects=_section(raw.get("subjects"), f"{where}: subjects", SUBJECT_RE),
        groups=_section(raw.get("groups"), f"{where}: groups", _NAME_RE),
    )


def _section(raw: Any, where: str, names: re.Pattern[str]) -> dict[str, dict[str, Role]]:
    if raw is None:
        return {}
    if not isinstance(raw, dict):
        raise RolesError(f"{where}: expected a mapping of names to roles")
    section: dict[str, dict[str, Role]] = {}
    for name, entry in raw.items():
        if not isinstance(name, str) or not names.match(name):
            raise RolesError(f"{where}: {str(name)[:40]!r} is not a valid name")
        if names is SUBJECT_RE and automation_actor(name):
            raise RolesError(f"{where}: {name[:40]!r} is an automation actor's name: no person may be recorded as it")
        section[name] = _entry(entry, f"{where}.{name}")
    return section


def _entry(raw: Any, where: str) -> dict[str, Role]:
    if isinstance(raw, str):
        return {ANY_FLEET: _role(raw, where)}
    if not isinstance(raw, dict) or not raw:
        raise RolesError(f"{where}: expected a role or a mapping of fleets ('*' for every fleet) to roles")
    entry: dict[str, Role] = {}
    for fleet, role in raw.items():
        if not isinstance(fleet, str) or not (fleet == ANY_FLEET or _NAME_RE.match(fleet)):
            raise RolesError(f"{where}: {str(fleet)[:40]!r} is not a fleet name or '*'")
        entry[fleet] = _role(role, f"{where}.{fleet}")
    return entry


def _role(raw: Any, where: str) -> Role:
    try:
        return Role(raw)
    except ValueError:
        raise RolesError(
            f"{where}: {str(raw)[:40]!r} is not a role (one of {', '.join(r.value for r in Role)})"
        ) from None


def _refuse_duplicate_keys(text: str, where: str) -> None:
    """PyYAML keeps the last of a key written twice: a second, forgotten `alice:` further down
    would silently replace the first. Refused instead, naming the line."""
    try:
        root = yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.YAMLError:
        return  # loads() says why, in its own words
    pending = [root] if root is not None else []
    while pending:
        node = pending.pop()
        if isinstance(node, yaml.MappingNode):
            seen: set[str] = set()
            for key, value in node.value:
                if key.value in seen:
                    raise RolesError(f"{where}: line {key.start_mark.line + 1}: {key.value[:40]!r} is written twice")
                seen.add(key.value)
                pending.append(value)
        elif isinstance(node, yaml.SequenceNode):
            pending.extend(node.value)
