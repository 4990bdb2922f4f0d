"""Engines and schema upgrades. The schema is applied by Alembic on first use."""

from __future__ import annotations

import ast
import os
import re
import threading
from pathlib import Path

from sqlalchemy import event, inspect, text
from sqlalchemy.engine import Engine
from sqlalchemy.exc import OperationalError, SQLAlchemyError

from fleetctl.text import one_line

MIGRATIONS_DIR = Path(__file__).resolve().parents[2] / "migrations"
_REVISION_LINE = re.compile(r"^(revision|down_revision)\s*(?::[^=\n]*)?=\s*(.+?)\s*$", re.MULTILINE)

_engines: dict[str, Engine] = {}
_upgraded: set[str] = set()
_lock = threading.Lock()


class DatabaseUnavailable(RuntimeError):
    """The database could not be reached or is locked; one readable line."""


def _normalise(url: str) -> str:
    # psycopg 3 is the driver we ship; accept the plain scheme operators will type.
    if url.startswith("postgresql://") or url.startswith("postgres://"):
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
        def _sqlite_pragmas(dbapi_conn, _record):  # noqa: ANN001
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

    return ScriptDirectory(str(MIGRATIONS_DIR)).get_current_head()


def current_revision(engine: Engine) -> str | None:
    with engine.connect() as conn:
        if not inspect(conn).has_table("alembic_version"):
            return None
        return conn.execute(text("SELECT version_num FROM alembic_version")).scalar()


def upgrade(engine: Engine) -> str:
    """Apply every migration up to head; returns the revision the database is now at."""
    from alembic import command
    from alembic.config import Config

    cfg = Config()
    cfg.set_main_option("script_location", str(MIGRATIONS_DIR))
    with engine.begin() as conn:
        cfg.attributes["connection"] = conn
        command.upgrade(cfg, "head")
    return current_revision(engine) or ""


def describe(url: str) -> str:
    """The URL without its password, for messages."""
    from sqlalchemy.engine import make_url

    try:
        return make_url(url).render_as_string(hide_password=True)
    except Exception:  # noqa: BLE001 - a malformed URL is reported by get_engine
        return "<unparseable database URL>"


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
                # Cheap check first: the CLI runs this on every start.
                if current_revision(engine) != head_revision():
                    upgrade(engine)
            except OperationalError as exc:
                raise DatabaseUnavailable(f"database {describe(url)} unavailable: {one_line(getattr(exc, 'orig', None) or exc)}") from None
            _upgraded.add(url)
    return engine


def dispose_all() -> None:
    with _lock:
        for engine in _engines.values():
            engine.dispose()
        _engines.clear()
        _upgraded.clear()
