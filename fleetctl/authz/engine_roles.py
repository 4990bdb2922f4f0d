"""The roles the engines themselves enforce (PostgreSQL's grants, the Temporal gateway), read
from a plain mapping {subject: role}: the same three roles as the front door's, each
everything the one before it may do. A subject is a person's or a service's name as its
certificate's common name and its database login spell it."""

from __future__ import annotations

import re
from collections.abc import Mapping
from enum import Enum


class EngineRolesError(ValueError):
    """A subject or role the engines cannot be given; one line naming it."""


class EngineRole(str, Enum):
    VIEWER = "viewer"
    OPERATOR = "operator"
    ADMIN = "admin"


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


def subject_roles(mapping: object, where: str) -> dict[str, EngineRole]:
    """{subject: role} from a mapping of names to role names; EngineRolesError on the first
    entry that is not one."""
    if not isinstance(mapping, Mapping):
        raise EngineRolesError(f"{where}: expected a mapping of subject to role (viewer, operator, admin)")
    roles: dict[str, EngineRole] = {}
    for subject, role in mapping.items():
        check_subject(subject, where)
        try:
            roles[subject] = EngineRole(role)
        except ValueError:
            raise EngineRolesError(
                f"{where}: {subject}: role {str(role)[:40]!r} is not one of viewer, operator, admin"
            ) from None
    return roles
