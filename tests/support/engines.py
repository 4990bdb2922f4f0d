"""The fleet databases' engines a test opens, closed after it (tests/conftest.py)."""

from __future__ import annotations

from contextlib import contextmanager
from typing import Iterator

from fleetctl.db.engine import dispose, engine_urls


@contextmanager
def engines_closed_after() -> Iterator[None]:
    """Every engine opened inside is closed and forgotten on the way out; those opened before
    stay. Kept, each test's engine (a database of its own, by URL) is thousands of objects
    that every full garbage collection of the process walks again."""
    before = engine_urls()
    try:
        yield
    finally:
        dispose(engine_urls() - before)
