"""A real headless Chromium, driven over its DevTools protocol: what a person sees of a page
(the HTML report, the Temporal UI), read as text and screenshotted."""

from __future__ import annotations

import base64
import json
import shutil
import subprocess
import tempfile
import time
import urllib.request
from pathlib import Path

import pytest

from tests.support.services import missing_service

CHROMIUM = "/usr/bin/chromium"
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


class DevTools:
    """One page of a headless Chromium, spoken to over its DevTools websocket."""

    def __init__(self, ws) -> None:
        self.ws, self.next_id, self.events = ws, 0, []

    def call(self, method: str, **params):
        self.next_id += 1
        self.ws.send(json.dumps({"id": self.next_id, "method": method, "params": params}))
        while True:
            message = json.loads(self.ws.recv())
            if message.get("id") == self.next_id:
                assert "error" not in message, message
                return message["result"]
            self.events.append(message)

    def wait_for(self, method: str, timeout: float = 20.0) -> dict:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if any(e.get("method") == method for e in self.events):
                return next(e for e in self.events if e.get("method") == method)
            self.events.append(json.loads(self.ws.recv()))
        raise TimeoutError(method)

    def evaluate(self, expression: str):
        """The value of a JavaScript expression in the page (JSON-serialisable values only)."""
        return self.call("Runtime.evaluate", expression=expression, returnByValue=True)["result"].get("value")

    def screenshot(self) -> bytes:
        """The whole page as PNG bytes, beyond the viewport included."""
        return base64.b64decode(self.call("Page.captureScreenshot", format="png", captureBeyondViewport=True)["data"])


@pytest.fixture
def browser():
    if not Path(CHROMIUM).exists():
        missing_service("Chromium", f"no {CHROMIUM}: install Debian's chromium (make system-deps does)")
    import websocket  # websocket-client, which the kubernetes client depends on

    profile = tempfile.mkdtemp(prefix="fleetctl-chromium-")
    proc = subprocess.Popen(
        [
            CHROMIUM,
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            f"--user-data-dir={profile}",
            "--remote-debugging-port=0",
            "--window-size=1200,900",
            "about:blank",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        port_file = Path(profile, "DevToolsActivePort")
        deadline = time.monotonic() + 30
        while not (port_file.exists() and port_file.read_text().count("\n") >= 1):
            assert proc.poll() is None and time.monotonic() < deadline, "chromium did not start"
            time.sleep(0.05)
        port = int(port_file.read_text().splitlines()[0])
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/json/list", timeout=10) as response:
            page = next(t for t in json.load(response) if t["type"] == "page")
        ws = websocket.create_connection(page["webSocketDebuggerUrl"], timeout=20, suppress_origin=True)
        yield DevTools(ws)
        ws.close()
    finally:
        proc.terminate()
        proc.wait(timeout=10)
        shutil.rmtree(profile, ignore_errors=True)
