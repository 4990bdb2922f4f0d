"""The roles the engines themselves enforce (PostgreSQL's grants, the Temporal gateway), read
from the front door's roles file (fleetctl.authz.roles): the same three roles, each
everything the one before it may do. A subject is a person's or a service's name as its
certificate's common name and its database login spell it."""

from __future__ import annotations

import re

from fleetctl.authz.roles import Role, RolesFile


class EngineRolesError(ValueError):
    """A subject or role the engines cannot be given; one line naming it."""


# Letters, digits, '.', '_', '-' and one '@': a subject is written into nginx's configuration
# and into SQL as an identifier, so nothing that could quote, end or escape either gets in.
# 63 characters: PostgreSQL's longest role name.
SUBJECT_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,62}(@[A-Za-z0-9][A-Za-z0-9._-]*)?\Z")
MAX_SUBJECT_CHARS = 63


def check_subject(subject: object, where: str) -> str:
    if not isinstance(subject, str) or not SUBJECT_RE.match(subject) or len(subject) > MAX_SUBJECT_CHARS:
        raise EngineRolesError(
            f"{where}: subject {str(subject)[:40]!r} must be name or name@where "
            f"(letters, digits, '.', '_', '-'; at most {MAX_SUBJECT_CHARS} characters)"
        )
    return subject


def engine_roles(roles: RolesFile, where: str) -> dict[str, Role]:
    """{subject: role} for the engines from the front door's roles file: each subject's role
    in every fleet it is named for (the least of them: the engines cannot tell one fleet's
    rows or workflows from another's). Groups are not given: a database login and a
    certificate name one person or service. EngineRolesError on a subject the engines
    cannot spell."""
    found: dict[str, Role] = {}
    for subject, per_fleet in roles.subjects.items():
        check_subject(subject, where)
        found[subject] = min(per_fleet.values(), key=lambda role: role.rank)
    return found
