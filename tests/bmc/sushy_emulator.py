"""A real Redfish service for BMC tests: sushy-tools' emulator with its fake driver.

`run_sushy_emulator` starts `sushy-emulator` as a subprocess on a free 127.0.0.1 port, with
HTTP basic auth (an htpasswd file, so the credentials path is real) and its state in the
given directory (by default the fake driver shares one in /tmp across runs), and yields a
`RedfishBmc`: base URL, system id and credentials. What the fake driver does and lacks
(sushy-tools 2.2):

- one system, the one configured here; its id in URLs is its UUID (by name: 307);
- ComputerSystem.Reset works: ForceRestart reads Off at once and On again 0 to 11
  seconds later (random, applied on the next read); On/ForceOff/GracefulShutdown take as long;
- every change of the system's state is PUT to an external notification URL: here a
  `ScriptedRedfish` on 127.0.0.1 records them, so a test reads what the BMC did from the
  BMC's side (`RedfishBmc.power_history`, `RedfishBmc.reset_requests`);
- no BootProgress and no LastResetTime: nothing but PowerState changes across a reset;
- no FirmwareInventory (404, although UpdateService links it);
- SimpleUpdate answers 500 "Failed fetching BIOS information" (the fake driver keeps no
  firmware versions); TaskService/Tasks/42 exists and is always Completed.
"""

from __future__ import annotations

import os
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
from tests.bmc.redfish_stub import Answer, RecordedRequest, ScriptedRedfish

SYSTEM_UUID = "9a5d1c3e-0f2b-4c6d-8e7f-1a2b3c4d5e6f"
SYSTEM_NAME = "gpu-node-01"
USERNAME = "fleetctl"
STARTUP_TIMEOUT_S = 20.0
RESET_TAKES_AT_MOST_S = 11.0  # the fake driver's longest power transition (randint(1, 11) on whole seconds)
NOTIFY_PATH = "/power-state-changes"
_DIRECT = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # never an environment proxy


@dataclass(frozen=True)
class RedfishBmc:
    base_url: str
    system_id: str
    username: str
    password: str
    notifications: list[RecordedRequest]  # the emulator's state changes, in order, as PUT to NOTIFY_PATH

    def power_history(self) -> list[str]:
        """The system's power states as the BMC changed them, from the configured "On";
        a reset shows as Off then On."""
        history = ["On"]
        for change in self.notifications:
            if change.body["power_state"] != history[-1]:
                history.append(change.body["power_state"])
        return history

    def reset_requests(self) -> list[str]:
        """The ResetType of every reset the BMC accepted, in order: a change that brings a
        new pending power transition (later changes carry it along until it applies)."""
        requested, pending = [], None
        for change in self.notifications:
            if change.body.get("pending_power") not in (None, pending):
                requested.append(change.body["pending_power"]["power_state"])
            pending = change.body.get("pending_power")
        return requested

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
    with ScriptedRedfish().serving() as receiver:
        receiver.script("PUT", NOTIFY_PATH, Answer(204))
        with _emulator(directory, port, htpasswd, f"{receiver.base_url}{NOTIFY_PATH}") as base_url:
            yield RedfishBmc(
                base_url=base_url,
                system_id=SYSTEM_UUID,
                username=USERNAME,
                password=password,
                notifications=receiver.requests,
            )


@contextmanager
def _emulator(directory: Path, port: int, htpasswd: Path, notify_url: str) -> Iterator[str]:
    config = directory / "sushy.conf"
    config.write_text(
        f"""
SUSHY_EMULATOR_FAKE_DRIVER = True
SUSHY_EMULATOR_LISTEN_IP = "127.0.0.1"
SUSHY_EMULATOR_LISTEN_PORT = {port}
SUSHY_EMULATOR_STATE_DIR = {str(directory / "state")!r}
SUSHY_EMULATOR_AUTH_FILE = {str(htpasswd)!r}
SUSHY_EMULATOR_FAKE_SYSTEMS = [
    {{"uuid": {SYSTEM_UUID!r}, "name": {SYSTEM_NAME!r}, "power_state": "On", "nics": [], "external_notifier": True}},
]
EXTERNAL_NOTIFICATION_URL = {notify_url!r}
"""
    )
    log_path = directory / "sushy.log"
    with log_path.open("wb") as log:
        emulator = subprocess.Popen(
            [sys.executable, "-m", "sushy_tools.emulator.main", "--config", str(config)],
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env={**os.environ, "NO_PROXY": "127.0.0.1", "no_proxy": "127.0.0.1"},  # notifications go direct
        )
    base_url = f"http://127.0.0.1:{port}"
    try:
        _wait_until_serving(emulator, base_url, log_path)
        yield base_url
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
    raise RuntimeError(f"sushy-emulator did not serve within {STARTUP_TIMEOUT_S:g}s: {log_path.read_text()[-2000:]}")
