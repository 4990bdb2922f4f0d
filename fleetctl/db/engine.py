"""Engines and schema upgrades. The schema is applied by Alembic on first use."""

from __future__ import annotations

import ast
import fcntl
import os
import re
import threading
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from importlib import resources
from pathlib import Path

from sqlalchemy import event, inspect, text
from sqlalchemy.engine import Engine
from sqlalchemy.engine.interfaces import DBAPIConnection
from sqlalchemy.exc import OperationalError, SQLAlchemyError
from sqlalchemy.pool import ConnectionPoolEntry

from fleetctl.text import one_line

# The migrations are the package `migrations`, shipped in the wheel: an installed fleetctl
# finds its schema there, not in a checkout (pip installs wheels unzipped, so it is a path).
MIGRATIONS_DIR = Path(str(resources.files("fleetctl.migrations")))
_REVISION_LINE = re.compile(r"^(revision|down_revision)\s*(?::[^=\n]*)?=\s*(.+?)\s*$", re.MULTILINE)

# pg_advisory_xact_lock key for schema migrations: any fixed 64-bit number, the same in every
# fleetctl process (b"fleetmig" read as a big-endian integer).
MIGRATION_LOCK_KEY = int.from_bytes(b"fleetmig", "big")

_engines: dict[str, Engine] = {}
_upgraded: set[str] = set()
_lock = threading.Lock()


class DatabaseUnavailable(RuntimeError):
    """The database could not be reached or is locked; one readable line."""


def _normalise(url: str) -> str:
    # psycopg 3 is the driver we ship; accept the plain scheme operators will type.
    if url.startswith(("postgresql://", "postgres://")):
        return "postgresql+psycopg://" + url.split("://", 1)[1]
    return url


def _create_private(db_file: Path) -> None:
    """The database holds check output, evidence and who did what: readable by its owner
    only. SQLite gives its -wal and -shm files the database file's permissions."""
    if not db_file.parent.exists():
        db_file.parent.mkdir(parents=True, mode=0o700)
    if not db_file.exists():
        os.close(os.open(db_file, os.O_CREAT | os.O_WRONLY, 0o600))


def _create(url: str) -> Engine:
    from sqlmodel import create_engine

    if url.startswith("sqlite"):
        path = url.split("///", 1)[-1]
        if path and path != ":memory:":
            _create_private(Path(path).expanduser())
        engine = create_engine(url, connect_args={"timeout": 30, "check_same_thread": False})

        @event.listens_for(engine, "connect")
        def _sqlite_pragmas(dbapi_conn: DBAPIConnection, _record: ConnectionPoolEntry) -> None:
            # WAL lets the CLI read while the worker writes; busy_timeout rides out short locks.
            cur = dbapi_conn.cursor()
            cur.execute("PRAGMA journal_mode=WAL")
            cur.execute("PRAGMA synchronous=NORMAL")
            cur.execute("PRAGMA busy_timeout=30000")
            cur.execute("PRAGMA foreign_keys=ON")
            cur.close()

        return engine
    return create_engine(url, pool_pre_ping=True, pool_size=10, max_overflow=20)


def head_revision() -> str:
    """The newest migration. Every CLI command asks, and importing Alembic to answer costs
    about half a second (bench/cli_startup.py), so a plain chain of literal `revision` /
    `down_revision` lines is read directly; Alembic answers for anything else (merges,
    branches, computed ids)."""
    return _linear_head() or _alembic_head()


def _linear_head() -> str | None:
    revisions, parents = set(), set()
    for path in (MIGRATIONS_DIR / "versions").glob("*.py"):
        found = dict(_REVISION_LINE.findall(path.read_text()))
        try:
            revision, parent = ast.literal_eval(found["revision"]), ast.literal_eval(found["down_revision"])
        except (KeyError, ValueError, SyntaxError):
            return None
        if not isinstance(revision, str) or not (parent is None or isinstance(parent, str)):
            return None
        revisions.add(revision)
        parents.add(parent)
    heads = revisions - parents
    return heads.pop() if len(heads) == 1 else None


def _alembic_head() -> str:
    from alembic.script import ScriptDirectory

    head = ScriptDirectory(str(MIGRATIONS_DIR)).get_current_head()
    if head is None:
        raise RuntimeError(f"no migration in {MIGRATIONS_DIR}")
    return head


def current_revision(engine: Engine) -> str | None:
    with engine.connect() as conn:
        if not inspect(conn).has_table("alembic_version"):
            return None
        return conn.execute(text("SELECT version_num FROM alembic_version")).scalar()


def may_write(engine: Engine, table: str) -> bool:
    """Whether this login may add rows to `table`: False under a read-only PostgreSQL role
    (fleetctl_viewer), so a read command skips what it would otherwise record on the way.
    A SQLite file is writable by whoever can open it."""
    if engine.dialect.name != "postgresql":
        return True
    with engine.connect() as conn:
        return bool(conn.execute(text("SELECT has_table_privilege(:t, 'INSERT')"), {"t": table}).scalar())


def upgrade(engine: Engine) -> str:
    """Apply every migration up to head; returns the revision the database is now at.

    Any number of processes may call this at once on one database (workers starting together
    on an empty one): each migrates under a database-wide lock, and Alembic, reading the
    version only once it holds the lock, finds nothing left to do after the first."""
    from alembic import command
    from alembic.config import Config

    cfg = Config()
    cfg.set_main_option("script_location", str(MIGRATIONS_DIR))
    with _file_lock(_sqlite_lock_path(engine)), engine.begin() as conn:
        if conn.dialect.name == "postgresql":
            # Held until this transaction commits: PostgreSQL's DDL is transactional, so the
            # next process's Alembic sees the finished schema and its version row.
            conn.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": MIGRATION_LOCK_KEY})
        cfg.attributes["connection"] = conn
        command.upgrade(cfg, "head")
    return current_revision(engine) or ""


def _at_head(engine: Engine) -> bool:
    """Whether the schema is at head; False too for a SQLite file another process holds locked
    while it migrates (processes opening an empty file at once found it so, one start in about
    50 on a loaded machine): the caller's upgrade then waits for that migration under its lock
    and finds nothing left to do."""
    try:
        return current_revision(engine) == head_revision()
    except OperationalError as exc:
        if engine.dialect.name == "sqlite" and "locked" in str(exc):
            return False
        raise


def _sqlite_lock_path(engine: Engine) -> Path | None:
    """The lock file beside a SQLite database file (None: not SQLite, or in memory)."""
    if engine.dialect.name != "sqlite" or not engine.url.database or engine.url.database == ":memory:":
        return None
    db = Path(engine.url.database).expanduser()
    return db.with_name(db.name + ".migrate.lock")


@contextmanager
def _file_lock(path: Path | None) -> Iterator[None]:
    # SQLite has no advisory locks; an flock on a file beside the database serialises the
    # processes of this host, which are the only ones a SQLite file can serve.
    if path is None:
        yield
        return
    with open(path, "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def describe(url: str) -> str:
    """The URL without its password, for messages."""
    from sqlalchemy.engine import make_url

    try:
        return make_url(url).render_as_string(hide_password=True)
    except Exception:  # noqa: BLE001 - a malformed URL is reported by get_engine
        return "<unparseable database URL>"


def require_existing(url: str) -> None:
    """DatabaseUnavailable (one line) when `url` names an SQLite file that is not there: a
    command that only reads must not create (and migrate) an empty database at a mistyped
    path and report an empty fleet from it."""
    url = _normalise(url)
    if not url.startswith("sqlite"):
        return  # a server's database: connecting to one that is not there fails by itself
    path = url.split("///", 1)[-1]
    if path and path != ":memory:" and not Path(path).expanduser().exists():
        raise DatabaseUnavailable(
            f"database {describe(url)} does not exist: create it with `fleetctl db upgrade`, or name the fleet's "
            "with --db-url or FLEETCTL_DB_URL"
        )


def get_engine(url: str, migrate: bool = True) -> Engine:
    """The engine for url, with the schema brought to head on first use in this process."""
    url = _normalise(url)
    with _lock:
        engine = _engines.get(url)
        if engine is None:
            try:
                engine = _engines[url] = _create(url)
            except (SQLAlchemyError, ValueError) as exc:
                raise DatabaseUnavailable(f"bad database URL {describe(url)}: {exc.__class__.__name__}") from None
        if migrate and url not in _upgraded:
            try:
                # Cheap check first: the CLI runs this on every start; a database at head is
                # never locked for it (a read-only login's SQLite file included).
                if not _at_head(engine):
                    upgrade(engine)
            except OperationalError as exc:
                raise DatabaseUnavailable(
                    f"database {describe(url)} unavailable: {one_line(getattr(exc, 'orig', None) or exc)}"
                ) from None
            _upgraded.add(url)
    return engine


def engine_urls() -> frozenset[str]:
    """The URLs this process holds an engine for."""
    with _lock:
        return frozenset(_engines)


def dispose(urls: Iterable[str]) -> None:
    """Closes and forgets the engines of `urls` (a later get_engine opens a new one)."""
    for engine in _forgotten(urls):
        engine.dispose()


def forget(urls: Iterable[str]) -> None:
    """Forgets the engines of `urls` without closing them: the garbage collector closes them
    once nothing holds them. Unlike dispose, never waits on a pool's lock, which a thread can
    leave held as it dies (a sync activity cancelled by the exception Temporal raises into its
    thread, inside the pool's code)."""
    _forgotten(urls)


def _forgotten(urls: Iterable[str]) -> list[Engine]:
    """The engines of `urls`, no longer this process's."""
    urls = list(urls)
    with _lock:
        _upgraded.difference_update(urls)
        engines = [_engines.pop(url, None) for url in urls]
    return [engine for engine in engines if engine is not None]


def dispose_all() -> None:
    dispose(engine_urls())
