"""PostgreSQL's own grants (`fleetctl engines grant-roles`) on a real cluster and a fleet
history: every read command of the CLI works under a viewer's login and changes nothing; a
write under it fails in one line naming the role it needs, and changes nothing; an operator
records what its commands write but never rewrites the history; regranting follows the mapping."""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
from sqlalchemy import MetaData, select, text
from sqlalchemy.exc import ProgrammingError
from temporalio.testing import ActivityEnvironment

from fleetctl.config import load_settings
from fleetctl.db.engine import dispose, get_engine, head_revision
from fleetctl.db.models import utcnow
from fleetctl.workflows.activities.remediation import RemediationActivities
from fleetctl.workflows.api import RmaRequest
from tests.reliability.history import seed
from tests.support.roles import as_roles_file

pytestmark = [pytest.mark.postgres, pytest.mark.temporal]
FLEETCTL = str(Path(sys.executable).parent / "fleetctl")
BASELINE = Path(__file__).parents[1] / "fixtures" / "firmware" / "h100-baseline.yaml"
ROLES = "alice: viewer\nolga: operator\nadam: admin\n"

# Each read command of the CLI that touches the database or Temporal (commands that read only
# files, such as `check list`, have nothing to refuse), with the fleet history's own names.
READS = [
    ["node", "list"],
    ["node", "list", "-o", "json"],
    ["node", "show", "n03"],
    ["node", "show", "n07", "-o", "json"],
    ["node", "history", "n07"],
    ["fleet", "status"],
    ["report"],
    ["report", "--automation"],
    ["job", "list"],
    ["job", "show", "sim-1"],
    ["rma", "list"],
    ["rma", "list", "-o", "json"],
    ["rma", "show", "2"],  # the record the fixture opened with its evidence (the history's 1 has none)
    ["firmware", "status"],
    ["runbook", "runs"],
    ["spares", "list"],
    ["firmware", "rollout", "list"],
    ["sim", "faults", "n01"],
    ["schedule", "list"],
    ["reconcile"],
    ["check", "xid-policy"],
    ["config"],
]


class Fleet:
    """A fleet database owned by `fleetctl`, its history seeded, the roles granted by the
    cluster's superuser."""

    def __init__(self, cluster, temporal_address: str, directory: Path) -> None:
        self.cluster, self.directory = cluster, directory
        self.database = "t_" + uuid.uuid4().hex[:12]
        self.psql("postgres", f"CREATE DATABASE {self.database} OWNER fleetctl")
        self.owner_url = self.url("fleetctl:fleetctl")
        self.env = {
            "PATH": os.environ["PATH"],
            "HOME": str(directory),
            "FLEETCTL_CONFIG": os.devnull,
            "TEMPORAL_CONFIG_FILE": str(directory / "temporal.toml"),
            "TEMPORAL_ADDRESS": temporal_address,
            "FLEETCTL_TASK_QUEUE": f"roles-{uuid.uuid4().hex[:8]}",
            # A fleet of its own: the session's Temporal server keeps other tests' guards running.
            "FLEETCTL_FLEET": f"roles-{uuid.uuid4().hex[:8]}",
            "FLEETCTL_OPERATOR": "tester@ci",
        }
        (directory / "temporal.toml").write_text("")
        seed(get_engine(self.owner_url), utcnow())

    def url(self, login: str) -> str:
        return f"postgresql+psycopg://{login}@127.0.0.1:{self.cluster.port}/{self.database}"

    def psql(self, database: str, sql: str) -> str:
        done = subprocess.run(
            [*self.cluster.as_user, str(self.cluster.bindir / "psql"), "-h", "127.0.0.1", "-p",
             str(self.cluster.port), "-U", "postgres", "-d", database, "-v", "ON_ERROR_STOP=1", "-qAt", "-c", sql],
            capture_output=True, text=True, check=True, timeout=60,
        )  # fmt: skip
        return done.stdout

    def fleetctl(self, login: str, *args: str, **env: str) -> subprocess.CompletedProcess:
        return subprocess.run(
            [FLEETCTL, *args],
            env={**self.env, "FLEETCTL_DB_URL": self.url(login), **env},
            capture_output=True,
            text=True,
            timeout=180,
        )

    def grant(self, roles: str) -> subprocess.CompletedProcess:
        path = self.directory / "engine-roles.yaml"
        path.write_text(as_roles_file(roles))
        return self.fleetctl("postgres", "engines", "grant-roles", "--roles", str(path))

    def rows(self) -> dict[str, list[tuple]]:
        """Every row of every table, read as the owner."""
        engine = get_engine(self.owner_url)
        tables = MetaData()
        tables.reflect(engine)
        with engine.connect() as conn:
            return {name: sorted(conn.execute(select(table)).all(), key=repr) for name, table in tables.tables.items()}

    def members(self) -> set[tuple[str, str]]:
        out = self.psql(
            self.database,
            "SELECT u.rolname || ' ' || g.rolname FROM pg_auth_members a JOIN pg_roles g ON g.oid = a.roleid "
            "JOIN pg_roles u ON u.oid = a.member WHERE g.rolname LIKE 'fleetctl\\_%'",
        )
        return {tuple(line.split()) for line in out.splitlines()}


@pytest.fixture(scope="module")
def fleet(postgres_server, temporal_address, tmp_path_factory):
    fleet = Fleet(postgres_server, temporal_address, tmp_path_factory.mktemp("roles"))
    baseline = fleet.fleetctl("fleetctl:fleetctl", "firmware", "baseline", "set", str(BASELINE))
    assert baseline.returncode == 0, baseline.stderr
    opened = ActivityEnvironment().run(
        RemediationActivities(
            load_settings(flags={"db_url": fleet.owner_url}, env={}, config_file=os.devnull), executors=None
        ).open_rma,
        RmaRequest(node="n05", reason="nccl-allreduce below its floor", actor="tester@ci"),
    )
    assert opened.rma_id == 2
    granted = fleet.grant(ROLES)
    assert granted.returncode == 0, granted.stderr
    yield fleet
    dispose([fleet.owner_url])


def test_the_grants_give_each_login_its_group(fleet) -> None:
    assert fleet.members() == {("alice", "fleetctl_viewer"), ("olga", "fleetctl_operator"), ("adam", "fleetctl_admin")}


@pytest.mark.parametrize("args", READS, ids=" ".join)
def test_every_read_command_works_for_a_viewer_and_changes_nothing(fleet, args) -> None:
    before = fleet.rows()
    as_viewer = fleet.fleetctl("alice", *args)
    assert fleet.rows() == before
    refused = [line for line in as_viewer.stderr.splitlines() if line.startswith("error:")]
    assert refused == [], refused
    if args[0] != "reconcile":  # exits 1 while the schedulers' drains differ, as for everyone
        assert as_viewer.returncode == 0, as_viewer.stderr


# (command, environment, the least group role that may run it, which the refusal names):
# each writes the database itself before anything else, so a refusal leaves the fleet as it was.
WRITES = [
    (["job", "checkpoint", "sim-1"], {}, "fleetctl_operator"),
    (["db", "prune"], {"FLEETCTL_RETENTION_RAW_OUTPUT_DAYS": "0.01", "FLEETCTL_RETENTION_CHECK_DAYS": "0.01"},
     "fleetctl_admin"),
    (["sim", "inject", "n01", "xid79"], {}, "fleetctl_operator"),
    (["firmware", "baseline", "set", str(BASELINE)], {}, "fleetctl_admin"),
]  # fmt: skip


@pytest.mark.parametrize(("args", "env", "needed"), WRITES, ids=[" ".join(w[0][:3]) for w in WRITES])
def test_a_write_under_the_viewer_fails_in_one_line_naming_the_role_and_changes_nothing(
    fleet, args, env, needed
) -> None:
    before = fleet.rows()
    done = fleet.fleetctl("alice", *args, **env)
    assert done.returncode == 1, done.stdout
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: the database refused this command"), done.stderr
    assert f"needs the {needed} role" in lines[0]
    assert fleet.rows() == before


def test_an_operator_records_what_a_viewer_may_not_but_never_rewrites_the_history(fleet) -> None:
    done = fleet.fleetctl("olga", "job", "checkpoint", "sim-2")
    assert done.returncode == 0, done.stderr
    assert any(row.job_id == "sim-2" for row in fleet.rows()["job_checkpoints"])
    operator, admin = get_engine(fleet.url("olga"), migrate=False), get_engine(fleet.url("adam"), migrate=False)
    try:
        for table in ("node_events", "automation_events"):
            with pytest.raises(ProgrammingError, match="permission denied"), operator.begin() as conn:
                conn.execute(text(f"DELETE FROM {table}"))
            with pytest.raises(ProgrammingError, match="permission denied"), operator.begin() as conn:
                conn.execute(text(f"UPDATE {table} SET actor = 'someone else'"))
        with admin.begin() as conn:  # an admin may; rolled back, the history stays for the other tests
            assert conn.execute(text("UPDATE node_events SET actor = actor")).rowcount > 0
            conn.rollback()
    finally:
        dispose([fleet.url("olga"), fleet.url("adam")])


def test_a_schema_behind_head_is_left_to_its_owner(fleet) -> None:
    # A read command migrates on open; under a viewer it says who may, in one line.
    head = head_revision()
    previous = fleet.psql(fleet.database, "SELECT version_num FROM alembic_version")
    assert previous.strip() == head
    fleet.psql(fleet.database, "UPDATE alembic_version SET version_num = '0018'")
    try:
        done = fleet.fleetctl("alice", "node", "list")
    finally:
        fleet.psql(fleet.database, f"UPDATE alembic_version SET version_num = '{head}'")
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 1 and len(lines) == 1, done.stderr
    assert "run `fleetctl db upgrade` as the schema's owner" in lines[0]


def test_sql_prints_the_statements_and_grants_nothing(fleet) -> None:
    path = fleet.directory / "other-roles.yaml"
    path.write_text(as_roles_file("zoe: admin\n"))
    done = fleet.fleetctl("postgres", "engines", "grant-roles", "--roles", str(path), "--sql")
    assert done.returncode == 0, done.stderr
    assert 'GRANT "fleetctl_admin" TO "zoe";' in done.stdout.splitlines()
    assert f'GRANT CONNECT ON DATABASE "{fleet.database}"' in done.stdout
    assert fleet.members() == {("alice", "fleetctl_viewer"), ("olga", "fleetctl_operator"), ("adam", "fleetctl_admin")}


def test_regranting_follows_the_mapping(fleet) -> None:
    try:
        regranted = fleet.grant("alice: operator\nadam: admin\n")
        assert regranted.returncode == 0, regranted.stderr
        # alice promoted, and no longer a viewer; olga, gone from the mapping, holds nothing.
        assert fleet.members() == {("alice", "fleetctl_operator"), ("adam", "fleetctl_admin")}
        assert fleet.grant("{}\n").returncode == 0
        assert fleet.members() == set()
    finally:
        assert fleet.grant(ROLES).returncode == 0
