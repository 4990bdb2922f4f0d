"""PostgreSQL's own grants for the three roles, as SQL, so that a viewer's database login
cannot write whatever program it runs:

    fleetctl_viewer     SELECT on every table, nothing else
    fleetctl_operator   SELECT on every table, and on the few tables in OPERATOR_WRITES the
                        row changes the operator's commands make themselves (the rest of
                        what an operator asks, a drain or an RMA decision, is written by the
                        workers, under the schema's owner); a table added later is read-only
                        to it until named there
    fleetctl_admin      every row change on every table, TRUNCATE included

The schema itself (CREATE, ALTER, DROP) stays with its owner, the account the workers run as,
which applies the migrations. Each subject gets a login role that is a member of its
role's group only; re-running the statements corrects what drifted (a subject demoted, or
gone from the mapping, loses the groups it no longer holds).
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from fleetctl.authz.engine_roles import EngineRolesError, check_subject
from fleetctl.authz.roles import Role

GROUPS: dict[Role, str] = {
    Role.VIEWER: "fleetctl_viewer",
    Role.OPERATOR: "fleetctl_operator",
    Role.ADMIN: "fleetctl_admin",
}
# What the operator's commands (fleetctl.authz.commands: OPERATE) write from the CLI itself;
# everything else they change goes through Temporal to the workers. So `db prune` (deletes
# check runs, health events, audit rows), `node import` (nodes), `firmware baseline set` and
# `schedule create` (sweep_intervals) stay the admin's. SELECT ... FOR UPDATE needs UPDATE.
OPERATOR_WRITES: dict[str, tuple[str, ...]] = {
    "automation_events": ("INSERT",),  # a refused drain, undrain, admit... is recorded
    "jobs": ("INSERT", "UPDATE"),  # job sync, job submit, job checkpoint
    "job_checkpoints": ("INSERT",),  # job checkpoint
    "rma_records": ("UPDATE",),  # rma close
    "spares": ("INSERT", "DELETE"),  # spares fill: the pool held
    "sim_faults": ("INSERT", "DELETE"),  # sim inject, sim clear
    "sim_scheduler_nodes": ("INSERT", "UPDATE"),  # the simulated scheduler's drains, job placement
}
ROW_CHANGES = "SELECT, INSERT, UPDATE, DELETE"
OWNER = "the schema's owner"


def quote_ident(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def quote_literal(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


def _create_if_missing(role: str, options: str) -> str:
    return (
        f"DO $$ BEGIN IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = {quote_literal(role)}) "
        f"THEN CREATE ROLE {quote_ident(role)} {options}; END IF; END $$"
    )


def group_statements(database: str, owner: str, schema: str = "public") -> list[str]:
    """The three group roles and their privileges on every table of `schema`, now and as
    `owner` creates them (a later migration's tables included)."""
    db, own, sch = quote_ident(database), quote_ident(owner), quote_ident(schema)
    viewer, operator, admin = (quote_ident(GROUPS[r]) for r in Role)
    groups = f"{viewer}, {operator}, {admin}"
    defaults = f"ALTER DEFAULT PRIVILEGES FOR ROLE {own} IN SCHEMA {sch} GRANT"
    return [
        *(_create_if_missing(GROUPS[r], "NOLOGIN") for r in Role),
        f"GRANT CONNECT ON DATABASE {db} TO {groups}",
        f"GRANT USAGE ON SCHEMA {sch} TO {groups}",
        # From nothing each time, so that a privilege granted by hand is taken back.
        f"REVOKE ALL ON ALL TABLES IN SCHEMA {sch} FROM {groups}",
        f"REVOKE ALL ON ALL SEQUENCES IN SCHEMA {sch} FROM {groups}",
        f"GRANT SELECT ON ALL TABLES IN SCHEMA {sch} TO {viewer}",
        f"GRANT SELECT ON ALL TABLES IN SCHEMA {sch} TO {operator}",
        *(
            f"GRANT {', '.join(verbs)} ON {sch}.{quote_ident(table)} TO {operator}"
            for table, verbs in sorted(OPERATOR_WRITES.items())
        ),
        f"GRANT {ROW_CHANGES}, TRUNCATE ON ALL TABLES IN SCHEMA {sch} TO {admin}",
        f"GRANT USAGE, SELECT ON ALL SEQUENCES IN SCHEMA {sch} TO {operator}, {admin}",
        f"{defaults} SELECT ON TABLES TO {viewer}",
        f"{defaults} SELECT ON TABLES TO {operator}",
        f"{defaults} {ROW_CHANGES}, TRUNCATE ON TABLES TO {admin}",
        f"{defaults} USAGE, SELECT ON SEQUENCES TO {operator}, {admin}",
    ]


def login_statements(subjects: Mapping[str, Role]) -> list[str]:
    """A login role per subject, a member of its role's group and of no other; every other
    login loses the groups."""
    statements: list[str] = []
    for subject, role in sorted(subjects.items()):
        check_subject(subject, "grant-roles")
        if subject in GROUPS.values():
            raise EngineRolesError(f"grant-roles: subject {subject!r} is the name of a group role")
        statements.append(_create_if_missing(subject, "LOGIN"))
        statements.append(f"GRANT {quote_ident(GROUPS[role])} TO {quote_ident(subject)}")
        others = ", ".join(quote_ident(GROUPS[r]) for r in Role if r is not role)
        statements.append(f"REVOKE {others} FROM {quote_ident(subject)}")
    groups = ", ".join(quote_literal(g) for g in GROUPS.values())
    # NOT IN over an empty list would be NOT IN (NULL), true for no one: nobody listed, none kept.
    listed = ", ".join(quote_literal(s) for s in sorted(subjects))
    kept = f" AND u.rolname NOT IN ({listed})" if listed else ""
    statements.append(
        "DO $$ DECLARE m record; BEGIN FOR m IN "
        "SELECT g.rolname AS grp, u.rolname AS member FROM pg_auth_members a "
        "JOIN pg_roles g ON g.oid = a.roleid JOIN pg_roles u ON u.oid = a.member "
        f"WHERE g.rolname IN ({groups}){kept} "
        "LOOP EXECUTE format('REVOKE %I FROM %I', m.grp, m.member); END LOOP; END $$"
    )
    return statements


_WRITE = re.compile(r'^\s*(INSERT\s+INTO|UPDATE|DELETE\s+FROM|TRUNCATE(?:\s+TABLE)?)\s+(?:\w+\.)?"?(\w+)"?', re.I)
_READ = re.compile(r"^\s*(SELECT|WITH)\b", re.I)
_FROM = re.compile(r'\bFROM\s+(?:\w+\.)?"?(\w+)"?', re.I)


def needed_for(statement: str) -> str:
    """The least group role whose privileges run `statement` (its first verb and table);
    the schema's owner for anything else (DDL: a migration)."""
    if written := _WRITE.match(statement):
        return _writer(written.group(1).split()[0].upper(), written.group(2).lower())
    if _READ.match(statement):
        # SELECT ... FOR UPDATE locks rows: UPDATE's privilege.
        if re.search(r"\bFOR\s+(NO\s+KEY\s+)?UPDATE\b", statement, re.I):
            locked = _FROM.search(statement)
            return _writer("UPDATE", locked.group(1).lower() if locked else "")
        return GROUPS[Role.VIEWER]
    return OWNER


def _writer(verb: str, table: str) -> str:
    return GROUPS[Role.OPERATOR] if verb in OPERATOR_WRITES.get(table, ()) else GROUPS[Role.ADMIN]


INSUFFICIENT_PRIVILEGE = "42501"


def refusal(sqlstate: str | None, statement: str, reason: str) -> str | None:
    """The one line a command refused by the database's grants ends with; None: not a refusal."""
    if sqlstate != INSUFFICIENT_PRIVILEGE:
        return None
    needed = needed_for(statement)
    what = "run `fleetctl db upgrade` as the schema's owner" if needed == OWNER else f"needs the {needed} role"
    first = reason.strip().splitlines()[0] if reason.strip() else "permission denied"
    return f"the database refused this command ({first}): it {what}"
