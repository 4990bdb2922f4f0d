"""A throwaway PostgreSQL cluster from Debian's `postgresql` package, on a free port.

PostgreSQL refuses to run as root, so as root the cluster is created and run as the
`postgres` user (runuser); otherwise as the current user.
"""

from __future__ import annotations

import glob
import os
import shutil
import subprocess
import tempfile
import uuid
from dataclasses import dataclass
from pathlib import Path

from fleetctl.connections.temporal_server import free_port


def postgres_bin_dir() -> Path | None:
    for candidate in sorted(glob.glob("/usr/lib/postgresql/*/bin"), reverse=True):
        if Path(candidate, "pg_ctl").exists():
            return Path(candidate)
    found = shutil.which("pg_ctl")
    return Path(found).parent if found else None


@dataclass
class PostgresCluster:
    datadir: Path
    port: int
    bindir: Path
    as_user: list[str]

    @property
    def url(self) -> str:
        return f"postgresql+psycopg://fleetctl:fleetctl@127.0.0.1:{self.port}/fleetctl"

    def pg_ctl(self, *args: str) -> None:
        subprocess.run(
            [*self.as_user, str(self.bindir / "pg_ctl"), "-D", str(self.datadir), "-w", "-t", "60", *args],
            check=True,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )

    def start(self) -> None:
        self.pg_ctl(
            "-o",
            f"-p {self.port} -k {self.datadir} -c listen_addresses=127.0.0.1 -c fsync=off",
            "-l",
            str(self.datadir / "server.log"),
            "start",
        )

    def stop(self) -> None:
        self.pg_ctl("-m", "fast", "stop")

    def sql(self, statement: str) -> None:
        """One statement as the superuser, over TCP; an error raises."""
        subprocess.run(
            [
                *self.as_user,
                str(self.bindir / "psql"),
                "-h",
                "127.0.0.1",
                "-p",
                str(self.port),
                "-U",
                "postgres",
                "-v",
                "ON_ERROR_STOP=1",
                "-q",
                "-c",
                statement,
            ],
            check=True,
        )


def start_postgres() -> PostgresCluster:
    bindir = postgres_bin_dir()
    if bindir is None:
        raise FileNotFoundError("PostgreSQL server binaries not found (Debian package postgresql)")
    as_user = ["runuser", "-u", "postgres", "--"] if os.geteuid() == 0 else []
    datadir = Path(tempfile.mkdtemp(prefix="fleetctl-pg-"))
    if as_user:
        shutil.chown(datadir, "postgres", "postgres")
    subprocess.run(
        [*as_user, str(bindir / "initdb"), "-D", str(datadir), "-A", "trust", "-U", "postgres"],
        check=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    cluster = PostgresCluster(datadir, free_port(), bindir, as_user)
    cluster.start()
    cluster.sql("CREATE ROLE fleetctl LOGIN PASSWORD 'fleetctl'")
    cluster.sql("CREATE DATABASE fleetctl OWNER fleetctl")
    return cluster


def remove_cluster(cluster: PostgresCluster) -> None:
    try:
        cluster.stop()
    finally:
        shutil.rmtree(cluster.datadir, ignore_errors=True)


def fresh_database_url(cluster: PostgresCluster, template: str = "template1") -> str:
    """A new database in `cluster`, owned by fleetctl, so its users never see each other's rows:
    empty, or a copy of the database named `template` (which nothing may be connected to)."""
    name = "t_" + uuid.uuid4().hex[:12]
    cluster.sql(f"CREATE DATABASE {name} TEMPLATE {template} OWNER fleetctl")
    return f"postgresql+psycopg://fleetctl:fleetctl@127.0.0.1:{cluster.port}/{name}"
