"""The tests' fleet databases: one migrated per session and copied for each test (SQLite and
PostgreSQL), and the engines a test opens let go after it (tests/conftest.py)."""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from fleetctl.db.engine import dispose, engine_urls, forget, get_engine


@contextmanager
def engines_let_go_after() -> Iterator[None]:
    """Every engine opened inside is forgotten on the way out; those opened before stay.
    Kept, each test's engine (a database of its own, by URL) is thousands of objects that
    every full garbage collection of the process walks again.

    SQLite ones are only forgotten (the collector closes them, silently): closing one waits
    on its pool's lock, which a sync activity cancelled inside the pool's code leaves held
    (Temporal raises the cancellation into its thread), and the test would wait forever.
    Others are closed now: psycopg warns of a connection the collector closes."""
    before = engine_urls()
    try:
        yield
    finally:
        opened = engine_urls() - before
        sqlite = {url for url in opened if url.startswith("sqlite")}
        forget(sqlite)
        dispose(opened - sqlite)


def migrated_database(path: Path) -> Path:
    """A new SQLite fleet database at `path`, migrated to the schema's head and closed (its
    write-ahead log checkpointed into the file, so a copy of the file is the whole database)."""
    url = f"sqlite:///{path}"
    get_engine(url)
    dispose([url])
    return path


def migrated_postgres_database(url: str) -> str:
    """The PostgreSQL database at `url` migrated to the schema's head and closed (a template
    admits no connection while it is copied); its name."""
    get_engine(url)
    dispose([url])
    return url.rsplit("/", 1)[1]


def private_copy(database: Path, to: Path) -> Path:
    """A copy of the database, readable by its owner only (as fleetctl creates one)."""
    fd = os.open(to, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600)
    with os.fdopen(fd, "wb") as out, open(database, "rb") as source:
        shutil.copyfileobj(source, out)
    return to
