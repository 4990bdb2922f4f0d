"""The front door's decision for one command asked by one authenticated subject: allowed or
denied, why, and the actor it is recorded under."""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from fleetctl.authz.commands import Kind, rule_of
from fleetctl.authz.roles import SUBJECT_RE, Role, RolesFile

# What `--as` may add to the subject: `alice/ticket-42` (a ticket, a change, a pager shift).
_NARROWING_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}\Z")


@dataclass(frozen=True)
class Decision:
    allowed: bool
    reason: str  # one line, said to the caller and kept in the audit trail
    actor: str = ""  # recorded on every change the command makes (allowed only)
    needed: Role | None = None
    held: Role | None = None


def valid_actor(actor: str) -> bool:
    """An actor the front door records: a subject, or subject/WHY."""
    subject, slash, why = actor.partition("/")
    return bool(SUBJECT_RE.match(subject)) and (not slash or bool(_NARROWING_RE.match(why)))


def actor_for(subject: str, requested: str | None) -> str | None:
    """The actor a command of `subject` is recorded under: the subject itself, or with `--as`
    its narrowing `subject/WHY`. None: `requested` names someone else (refused)."""
    if not requested or requested == subject:
        return subject
    head, slash, why = requested.partition("/")
    if slash and head == subject and _NARROWING_RE.match(why):
        return requested
    return None


def authorize(
    subject: str,
    roles: RolesFile,
    command: str,
    args: Sequence[str],
    fleet: str,
    *,
    groups: Iterable[str] = (),
    requested_actor: str | None = None,
) -> Decision:
    """Whether `subject` (and its identity provider's `groups`) may run `command` with `args`
    in `fleet` through the front door."""
    held = roles.role_of(subject, fleet, groups)
    rule = rule_of(command)
    if rule is None:
        return Decision(False, f"{command!r} is not a fleetctl command", held=held)
    kind, needed = rule.needs(args)
    if kind is not Kind.WRITE:
        return Decision(False, f"{command} is not run by the front door ({kind.value} command)", held=held)
    actor = actor_for(subject, requested_actor)
    if actor is None:
        return Decision(
            False,
            f"--as {requested_actor!r}: {subject} may act only as {subject} or {subject}/WHY",
            needed=needed,
            held=held,
        )
    if held is None or not held.covers(needed):
        holds = f"holds {held.value}" if held else "holds no role"
        return Decision(
            False,
            f"{command} needs the {needed.value} role in fleet {fleet} ({subject} {holds})",
            needed=needed,
            held=held,
        )
    return Decision(True, f"{subject} holds {held.value} in fleet {fleet}", actor=actor, needed=needed, held=held)
