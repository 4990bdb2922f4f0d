"""The fleet databases' engines a test opens, let go after it (tests/conftest.py)."""

from __future__ import annotations

from contextlib import contextmanager
from typing import Iterator

from fleetctl.db.engine import dispose, engine_urls, forget


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
