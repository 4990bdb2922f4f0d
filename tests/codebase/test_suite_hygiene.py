"""What keeps one test process of `make test` from growing with every test: a full garbage
collection stops every thread, a workflow activation's too, and one past Temporal's 2 s
deadlock bound fails its task (TMPRL1101)."""

from __future__ import annotations

import gc
import weakref

from fleetctl.db.engine import engine_urls, get_engine
from tests.support.engines import engines_let_go_after


def test_the_engines_a_test_opens_are_let_go_after_it_and_the_others_kept(tmp_path) -> None:
    kept = f"sqlite:///{tmp_path / 'kept.db'}"
    get_engine(kept)
    with engines_let_go_after():
        opened = f"sqlite:///{tmp_path / 'opened.db'}"
        engine = weakref.ref(get_engine(opened))
        assert opened in engine_urls()
    assert opened not in engine_urls() and kept in engine_urls()
    gc.collect()
    assert engine() is None  # nothing of the process holds it: the collector closed it
    assert get_engine(opened) is not None  # asked again: a new one, the schema checked again


def test_what_collection_built_is_frozen_out_of_every_collection() -> None:
    assert gc.get_freeze_count() > 0
