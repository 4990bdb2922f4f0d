"""Many processes starting at once on one empty database: every one comes up, the schema is
applied once (two workers on an empty PostgreSQL once raced, one died with
UniqueViolation on pg_type_typname_nsp_index)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from sqlalchemy import text

from fleetctl.db.engine import current_revision, dispose_all, get_engine, head_revision

REPO = Path(__file__).resolve().parents[2]
PROCESSES = 4
# Each process waits for one line on stdin before it migrates, so all of them reach the empty
# database together: the test releases them with one write each, back to back.
MIGRATE = """
import sys
from fleetctl.db.engine import get_engine
url = sys.argv[1]
sys.stdin.readline()
get_engine(url)
print("migrated")
"""


def migrate_all_at_once(url: str) -> list[subprocess.CompletedProcess]:
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", MIGRATE, url],
            cwd=REPO,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(PROCESSES)
    ]
    # Python and SQLAlchemy take a moment to import; a process still importing when released
    # reads the line as soon as it is ready, which only makes the race narrower, never absent.
    for proc in procs:
        proc.stdin.write("go\n")
        proc.stdin.flush()
    # Bounded by what one migration takes times the processes, with room for a loaded machine.
    return [subprocess.CompletedProcess(p.args, p.wait(120), *p.communicate()) for p in procs]


def assert_one_schema(url: str, results) -> None:
    failures = [r.stderr.strip().splitlines()[-1:] for r in results if r.returncode != 0]  # each one's last word
    assert not failures, failures
    assert all(r.stdout.strip() == "migrated" for r in results)
    engine = get_engine(url, migrate=False)
    assert current_revision(engine) == head_revision()
    with engine.connect() as conn:
        assert conn.execute(text("SELECT count(*) FROM alembic_version")).scalar() == 1
    dispose_all()


@pytest.mark.postgres
def test_processes_migrate_an_empty_postgresql_at_once(postgres_server):
    from bench.postgres import fresh_database_url

    url = fresh_database_url(postgres_server)
    assert_one_schema(url, migrate_all_at_once(url))


def test_processes_migrate_an_empty_sqlite_file_at_once(tmp_path):
    url = f"sqlite:///{tmp_path / 'fleet.db'}"
    assert_one_schema(url, migrate_all_at_once(url))
    assert (tmp_path / "fleet.db.migrate.lock").exists()
