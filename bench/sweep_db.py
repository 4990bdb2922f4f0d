"""The sweep on PostgreSQL: the scale benchmark's run (N nodes in production, one quick-suite
active-check sweep over all of them, the CLI at that size; default 300, --full 10,000) with
the fleet database on SQLite and then on PostgreSQL, in one run, each on a fresh dev server;
every figure is reported as PostgreSQL over SQLite, the baseline of the same run.

The PostgreSQL cluster is the tests' throwaway one (bench/postgres.py): local, over
TCP on 127.0.0.1, fsync off. A production database on its own host with fsync on pays a
network round trip and a flush per commit that this one does not; the ratio here is the
engine's and the driver's cost, not the network's."""

from __future__ import annotations

import asyncio
import tempfile
from pathlib import Path

from bench.harness import CannotMeasure
from bench.scale import FleetDatabase, measure, sqlite_database

NODES = 300
NODES_FULL = 10000


def postgres_database(cluster, url: str) -> FleetDatabase:
    from sqlalchemy import create_engine, text

    from bench.scaleout import postgres_cpu_seconds

    def mib() -> float:
        engine = create_engine(url)
        try:
            with engine.connect() as connection:
                return round(
                    connection.execute(text("SELECT pg_database_size(current_database())")).scalar() / 2**20, 1
                )
        finally:
            engine.dispose()

    return FleetDatabase(url, mib, lambda: postgres_cpu_seconds(cluster.datadir))


def sessions_opened(url: str) -> int:
    """Connections made to the database since it was created (PostgreSQL 14+): a pool that
    keeps its connections opens few; one that overflows opens one per busy moment."""
    from sqlalchemy import create_engine, text

    engine = create_engine(url)
    try:
        with engine.connect() as connection:
            return connection.execute(
                text("SELECT sessions FROM pg_stat_database WHERE datname = current_database()")
            ).scalar()
    finally:
        engine.dispose()


async def measure_both(nodes: int) -> dict:
    try:
        from bench.postgres import fresh_database_url, remove_cluster, start_postgres
    except ImportError as exc:
        raise CannotMeasure(f"bench/postgres.py not importable: {exc}") from None
    try:
        cluster = start_postgres()
    except FileNotFoundError as exc:
        raise CannotMeasure(f"no PostgreSQL: {exc}") from None
    from fleetctl.db.engine import dispose_all

    runs = {}
    try:
        with tempfile.TemporaryDirectory(prefix="bench-sweep-sqlite-") as tmp:
            runs["sqlite"] = await measure(nodes, Path(tmp), sqlite_database(Path(tmp)))
        dispose_all()
        with tempfile.TemporaryDirectory(prefix="bench-sweep-postgres-") as tmp:
            url = fresh_database_url(cluster)
            runs["postgresql"] = await measure(nodes, Path(tmp), postgres_database(cluster, url))
            runs["postgresql"]["sessions_opened"] = sessions_opened(url)
        dispose_all()
    finally:
        remove_cluster(cluster)
    return runs


def ratio(postgresql: float | None, sqlite: float | None) -> float | None:
    if not isinstance(postgresql, (int, float)) or not isinstance(sqlite, (int, float)) or not sqlite:
        return None
    return round(postgresql / sqlite, 2)


def run(full: bool) -> dict:
    nodes = NODES_FULL if full else NODES
    runs = asyncio.run(measure_both(nodes))
    for name, measured in runs.items():
        if measured["sweep"]["status"] != "completed":
            raise CannotMeasure(f"the sweep on {name} did not complete: {measured['sweep']}")
    sqlite, postgresql = runs["sqlite"], runs["postgresql"]
    pairs = {
        "import_s": (postgresql["import_s"], sqlite["import_s"]),
        "sweep_s": (postgresql["sweep"]["seconds"], sqlite["sweep"]["seconds"]),
        "worker_cpu_s_in_sweep": (postgresql["sweep"]["cpu_s"]["worker"], sqlite["sweep"]["cpu_s"]["worker"]),
        "server_cpu_s_in_sweep": (postgresql["sweep"]["cpu_s"]["server"], sqlite["sweep"]["cpu_s"]["server"]),
        "worker_rss_mib_peak": (postgresql["worker_rss_mib"]["peak"], sqlite["worker_rss_mib"]["peak"]),
        "fleet_db_mib": (postgresql["fleet_db_mib"], sqlite["fleet_db_mib"]),
        **{
            f"cli {name} median_s": (postgresql["cli"][name].get("median_s"), sqlite["cli"][name].get("median_s"))
            for name in sqlite["cli"]
        },
    }
    figures = {
        "nodes": nodes,
        **{
            name: {"postgresql": p, "sqlite": s, "postgresql_over_sqlite": ratio(p, s)}
            for name, (p, s) in pairs.items()
        },
        "postgresql_cpu_s_in_sweep": postgresql["sweep"]["cpu_s"].get("database"),
        "postgresql_sessions_opened": postgresql["sessions_opened"],
    }
    return {
        "figures": figures,
        "order": list(runs),
        "runs": runs,
        "shortcut": "nodes set to production in the fleet database before `fleetctl node import`; no burn-in",
        "postgresql": "bench/postgres.py: local cluster, TCP on 127.0.0.1, fsync=off",
    }


def _node_count(text: str) -> int:
    import argparse

    if not text.isdigit() or not 1 <= int(text) <= NODES_FULL:
        raise argparse.ArgumentTypeError(f"a whole number of nodes, 1..{NODES_FULL}")
    return int(text)


def main(argv: list[str] | None = None) -> int:
    """`python -m bench.sweep_db --nodes N`: one size between the default and --full's, with
    the same result file and bookkeeping as `python -m bench.run --only sweep_db`."""
    import argparse
    import importlib

    from bench.harness import machine
    from bench.run import run_one

    parser = argparse.ArgumentParser(prog="python -m bench.sweep_db", description=__doc__.strip().splitlines()[0])
    parser.add_argument("--nodes", type=_node_count, default=NODES, metavar=f"1..{NODES_FULL}")
    nodes = parser.parse_args(argv).nodes
    # run_one imports bench.sweep_db, which is not this module when it runs as __main__.
    importlib.import_module("bench.sweep_db").NODES = nodes
    return 0 if run_one("sweep_db", False, machine()) else 1


if __name__ == "__main__":
    raise SystemExit(main())
