"""The database layer on real SQLite and real PostgreSQL."""

from __future__ import annotations

import pytest
from sqlalchemy import inspect

from fleetctl.db import queries
from fleetctl.db.engine import _alembic_head, current_revision, get_engine, head_revision
from fleetctl.inventory.parse import parse_inventory

INVENTORY = """
nodes:
  - {name: n1, address: sim://n1, profile: h100-sxm, rack: r1, labels: {pool: a}}
  - {name: n2, address: sim://n2, profile: h100-sxm, rack: r2}
"""


def _transition(engine, key: str, version: int = 0, frm: str = "new", to: str = "burn_in") -> int:
    return queries.record_transition(
        engine,
        node_name="n1",
        from_state=frm,
        to_state=to,
        trigger="begin_burn_in",
        cause="test",
        actor="tester",
        actor_kind="operator",
        workflow_id="node/n1",
        run_id="r",
        expected_version=version,
        idempotency_key=key,
    )


def test_schema_comes_from_alembic(db_url: str) -> None:
    engine = get_engine(db_url)
    assert current_revision(engine) == head_revision()
    tables = set(inspect(engine).get_table_names())
    assert {"nodes", "node_events", "check_runs", "health_events", "jobs", "sim_faults", "alembic_version"} <= tables


def test_head_read_from_the_version_files_is_alembics_head() -> None:
    assert head_revision() == _alembic_head()


def test_reimport_is_idempotent_and_keeps_state(db_url: str) -> None:
    engine = get_engine(db_url)
    specs = parse_inventory(INVENTORY)
    assert queries.upsert_nodes(engine, specs) == (["n1", "n2"], [], [])
    _transition(engine, "k1")
    assert queries.upsert_nodes(engine, specs) == ([], [], ["n1", "n2"])
    changed = parse_inventory(INVENTORY.replace("rack: r2", "rack: r9"))
    assert queries.upsert_nodes(engine, changed) == ([], ["n2"], ["n1"])
    n1 = queries.get_node(engine, "n1")
    assert (n1.state, n1.state_version, n1.labels) == ("burn_in", 1, {"pool": "a"})
    assert queries.get_node(engine, "n2").rack == "r9"


def test_transition_is_idempotent_by_key(db_url: str) -> None:
    engine = get_engine(db_url)
    queries.upsert_nodes(engine, parse_inventory(INVENTORY))
    assert _transition(engine, "node/n1@1") == 1
    assert _transition(engine, "node/n1@1") == 1  # a retried activity
    assert len(queries.node_events(engine, "n1")) == 1


def test_stale_writer_is_refused(db_url: str) -> None:
    engine = get_engine(db_url)
    queries.upsert_nodes(engine, parse_inventory(INVENTORY))
    _transition(engine, "a")
    with pytest.raises(queries.StaleStateVersion):
        _transition(engine, "b", version=0)
    node = queries.get_node(engine, "n1")
    assert (node.state, node.state_version) == ("burn_in", 1)
    assert [e.to_state for e in queries.node_events(engine, "n1")] == ["burn_in"]


def test_writer_right_about_the_state_but_behind_on_the_version_is_refused(db_url: str) -> None:
    """Two workers racing on one node: the loser read `burn_in` one transition ago and the
    node has since left and come back to `burn_in`. Its state is right, its version is
    not, so only the version check can refuse it."""
    engine = get_engine(db_url)
    queries.upsert_nodes(engine, parse_inventory(INVENTORY))
    _transition(engine, "a")  # new -> burn_in, v1
    _transition(engine, "b", version=1, frm="burn_in", to="maintenance")  # v2
    _transition(engine, "c", version=2, frm="maintenance", to="burn_in")  # v3
    with pytest.raises(queries.StaleStateVersion, match=r"burn_in@3, writer expected burn_in@1"):
        _transition(engine, "late", version=1, frm="burn_in", to="production")
    node = queries.get_node(engine, "n1")
    assert (node.state, node.state_version) == ("burn_in", 3)
    assert [e.to_state for e in queries.node_events(engine, "n1")] == ["burn_in", "maintenance", "burn_in"]


def test_a_name_known_in_other_cases_is_refused_and_nothing_is_written(db_url: str) -> None:
    """`GPU-1` when `gpu-1` is in the database is one machine under two names: refused."""
    engine = get_engine(db_url)
    queries.upsert_nodes(engine, parse_inventory(INVENTORY))
    shouting = parse_inventory(INVENTORY.replace("name: n1", "name: N1").replace("name: n2", "name: n3"))
    with pytest.raises(queries.NameClash, match=r"N1 \(known as n1\)"):
        queries.upsert_nodes(engine, shouting)
    assert queries.get_node(engine, "N1") is None and queries.get_node(engine, "n3") is None
    assert queries.case_clashes(engine, ["n1", "n2", "new"]) == {}  # the same spelling is the same node
