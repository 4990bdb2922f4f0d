"""A real Redfish service for BMC tests: sushy-tools' emulator with its fake driver.

`run_sushy_emulator` starts `sushy-emulator` as a subprocess on a free 127.0.0.1 port, with
HTTP basic auth (an htpasswd file, so the credentials path is real) and its state in the
given directory (by default the fake driver shares one in /tmp across runs), and yields a
`RedfishBmc`: base URL, system id and credentials. What the fake driver does and lacks
(sushy-tools 2.2):

- one system, the one configured here; its id in URLs is its UUID (by name: 307);
- ComputerSystem.Reset works: ForceRestart reads Off at once and On again 1 to 11
  seconds later (random); On/ForceOff/GracefulShutdown take as long;
- no BootProgress and no LastResetTime: nothing but PowerState changes across a reset;
- no FirmwareInventory (404, although UpdateService links it);
- SimpleUpdate answers 500 "Failed fetching BIOS information" (the fake driver keeps no
  firmware versions); TaskService/Tasks/42 exists and is always Completed.
"""

from __future__ import annotations

import secrets
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import bcrypt

from fleetctl.bmc.redfish import RedfishClient

SYSTEM_UUID = "9a5d1c3e-0f2b-4c6d-8e7f-1a2b3c4d5e6f"
SYSTEM_NAME = "gpu-node-01"
USERNAME = "fleetctl"
STARTUP_TIMEOUT_S = 20.0
_DIRECT = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # never an environment proxy


@dataclass(frozen=True)
class RedfishBmc:
    base_url: str
    system_id: str
    username: str
    password: str

    def client(self, **options: Any) -> RedfishClient:
        return RedfishClient(self.base_url, self.username, self.password, **options)


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@contextmanager
def run_sushy_emulator(directory: Path) -> Iterator[RedfishBmc]:
    password = "pw-" + secrets.token_urlsafe(12)
    htpasswd = directory / "htpasswd"
    # Few bcrypt rounds: sushy checks the password on every request.
    htpasswd.write_text(f"{USERNAME}:{bcrypt.hashpw(password.encode(), bcrypt.gensalt(rounds=4)).decode()}\n")
    port = free_port()
    config = directory / "sushy.conf"
    config.write_text(
        f"""
SUSHY_EMULATOR_FAKE_DRIVER = True
SUSHY_EMULATOR_LISTEN_IP = "127.0.0.1"
SUSHY_EMULATOR_LISTEN_PORT = {port}
SUSHY_EMULATOR_STATE_DIR = {str(directory / "state")!r}
SUSHY_EMULATOR_AUTH_FILE = {str(htpasswd)!r}
SUSHY_EMULATOR_FAKE_SYSTEMS = [
    {{"uuid": {SYSTEM_UUID!r}, "name": {SYSTEM_NAME!r}, "power_state": "On", "nics": []}},
]
"""
    )
    log_path = directory / "sushy.log"
    with log_path.open("wb") as log:
        emulator = subprocess.Popen(
            [sys.executable, "-m", "sushy_tools.emulator.main", "--config", str(config)],
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
        )
    base_url = f"http://127.0.0.1:{port}"
    try:
        _wait_until_serving(emulator, base_url, log_path)
        yield RedfishBmc(base_url=base_url, system_id=SYSTEM_UUID, username=USERNAME, password=password)
    finally:
        emulator.terminate()
        try:
            emulator.wait(timeout=5)
        except subprocess.TimeoutExpired:
            emulator.kill()
            emulator.wait()


def _wait_until_serving(emulator: subprocess.Popen[bytes], base_url: str, log_path: Path) -> None:
    # The service root needs no credentials, so it answers as soon as Flask listens.
    deadline = time.monotonic() + STARTUP_TIMEOUT_S
    while time.monotonic() < deadline:
        if emulator.poll() is not None:
            raise RuntimeError(f"sushy-emulator exited with {emulator.returncode}: {log_path.read_text()[-2000:]}")
        try:
            with _DIRECT.open(f"{base_url}/redfish/v1/", timeout=1):
                return
        except OSError:
            time.sleep(0.1)
    raise RuntimeError(
        f"sushy-emulator did not serve within {STARTUP_TIMEOUT_S:g}s: {log_path.read_text()[-2000:]}"
    )
