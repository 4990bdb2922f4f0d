"""The grants as SQL, and which role a refused statement needs: plain functions, table-driven."""

from __future__ import annotations

import pytest

from fleetctl.authz.engine_roles import EngineRolesError
from fleetctl.authz.pg_roles import (
    OPERATOR_WRITES,
    OWNER,
    group_statements,
    login_statements,
    needed_for,
    quote_ident,
    refusal,
)
from fleetctl.authz.roles import Role
from fleetctl.db.models import SQLModel


@pytest.mark.parametrize(
    ("statement", "needed"),
    [
        ("SELECT nodes.name FROM nodes", "fleetctl_viewer"),
        ("WITH x AS (SELECT 1) SELECT * FROM x", "fleetctl_viewer"),
        ("SELECT * FROM jobs FOR NO KEY UPDATE", "fleetctl_operator"),
        ("SELECT * FROM rma_records WHERE id = 1 FOR UPDATE", "fleetctl_operator"),
        ("SELECT * FROM nodes WHERE name = %(n)s FOR UPDATE", "fleetctl_admin"),
        ("INSERT INTO job_checkpoints (job_id, at) VALUES (%(a)s, %(b)s)", "fleetctl_operator"),
        ("UPDATE jobs SET state=%(s)s", "fleetctl_operator"),
        ("DELETE FROM sim_faults WHERE node_name = 'n1'", "fleetctl_operator"),
        ("INSERT INTO automation_events (kind) VALUES ('refused')", "fleetctl_operator"),
        ("UPDATE nodes SET state=%(s)s", "fleetctl_admin"),
        ("DELETE FROM sweep_intervals", "fleetctl_admin"),
        ('DELETE FROM "check_runs" WHERE id IN (1)', "fleetctl_admin"),
        ("UPDATE check_runs SET raw_output = ''", "fleetctl_admin"),
        ("INSERT INTO firmware_baselines (profile) VALUES ('h100')", "fleetctl_admin"),
        ("INSERT INTO node_events (node_name) VALUES ('n1')", "fleetctl_admin"),
        ("UPDATE node_events SET actor = 'x'", "fleetctl_admin"),
        ("delete from public.automation_events", "fleetctl_admin"),
        ("TRUNCATE TABLE nodes", "fleetctl_admin"),
        ("ALTER TABLE nodes ADD COLUMN x INTEGER", OWNER),
        ("CREATE TABLE alembic_version (version_num VARCHAR(32))", OWNER),
    ],
)
def test_the_role_a_statement_needs(statement: str, needed: str) -> None:
    assert needed_for(statement) == needed


def test_a_refusal_is_one_line_naming_the_role_and_nothing_else_is_one() -> None:
    line = refusal("42501", "INSERT INTO jobs (job_id) VALUES ('a')", "permission denied for table jobs\nDETAIL: x")
    assert line == (
        "the database refused this command (permission denied for table jobs): it needs the fleetctl_operator role"
    )
    assert "fleetctl db upgrade" in (refusal("42501", "ALTER TABLE nodes ADD x int", "must be owner") or "")
    assert refusal("23505", "INSERT INTO nodes (name) VALUES ('a')", "duplicate key") is None
    assert refusal(None, "SELECT 1", "connection lost") is None


def test_the_operators_writes_name_real_tables_and_keep_the_history() -> None:
    assert set(OPERATOR_WRITES) <= set(SQLModel.metadata.tables)
    assert all(set(verbs) <= {"INSERT", "UPDATE", "DELETE"} for verbs in OPERATOR_WRITES.values())
    # The record of who did what: an operator's refusals are added to it, nothing rewritten.
    assert "node_events" not in OPERATOR_WRITES and OPERATOR_WRITES["automation_events"] == ("INSERT",)


def test_group_grants_quote_names_and_give_the_operator_its_tables_only() -> None:
    sql = "\n".join(group_statements('fleet"db', "fleetctl"))
    assert 'GRANT CONNECT ON DATABASE "fleet""db" TO' in sql
    assert 'GRANT SELECT ON ALL TABLES IN SCHEMA "public" TO "fleetctl_operator"' in sql
    assert 'GRANT INSERT, UPDATE ON "public"."jobs" TO "fleetctl_operator"' in sql
    assert 'GRANT INSERT ON "public"."automation_events" TO "fleetctl_operator"' in sql
    # A table a later migration adds is read-only to operators until named in OPERATOR_WRITES.
    assert 'IN SCHEMA "public" GRANT SELECT ON TABLES TO "fleetctl_operator"' in sql
    assert 'GRANT SELECT ON ALL TABLES IN SCHEMA "public" TO "fleetctl_viewer"' in sql
    assert (
        'ALTER DEFAULT PRIVILEGES FOR ROLE "fleetctl" IN SCHEMA "public" GRANT SELECT ON TABLES TO "fleetctl_viewer"'
        in sql
    )


def test_each_login_is_in_its_group_only() -> None:
    sql = login_statements({"alice": Role.VIEWER})
    assert 'GRANT "fleetctl_viewer" TO "alice"' in sql
    assert 'REVOKE "fleetctl_operator", "fleetctl_admin" FROM "alice"' in sql
    assert "NOT IN ('alice')" in sql[-1]
    assert "NOT IN" not in login_statements({})[-1]  # nobody listed: every member loses its group


@pytest.mark.parametrize("subject", ["fleetctl_admin", 'x"; DROP TABLE nodes; --', "a b", "", "é"])
def test_a_subject_that_is_no_login_name_is_refused(subject: str) -> None:
    with pytest.raises(EngineRolesError):
        login_statements({subject: Role.VIEWER})


def test_quote_ident_doubles_quotes() -> None:
    assert quote_ident('a"b') == '"a""b"'
