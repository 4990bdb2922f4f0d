"""The HTML report in a real headless Chromium, driven over the DevTools protocol: no console
errors, no request leaves the file, every plot is an SVG with a size, stragglers are marked,
and a screenshot comes out."""

from __future__ import annotations

import base64
import json
import shutil
import subprocess
import tempfile
import time
import urllib.request
from datetime import datetime, timezone
from pathlib import Path

import pytest

from fleetctl.db.engine import get_engine
from fleetctl.report import build_report, render_html
from tests.report import history
from tests.support.services import missing_service

CHROMIUM = "/usr/bin/chromium"
NOW = datetime(2025, 3, 1, 12, 0, tzinfo=timezone.utc)


@pytest.fixture(autouse=True)
def chromium_installed() -> None:
    if not Path(CHROMIUM).exists():
        missing_service("Chromium", f"no {CHROMIUM}: install Debian's chromium (make system-deps does)")


# Per SVG: its accessible name and rendered size; the straggler dots.
PAGE_FACTS = """JSON.stringify({
  title: document.title,
  svgs: [...document.querySelectorAll('svg.plot')].map(s => {
    const r = s.getBoundingClientRect();
    return {name: s.getAttribute('aria-label'), width: r.width, height: r.height,
            marks: s.querySelectorAll('rect.bar, circle').length};
  }),
  stragglers: [...document.querySelectorAll('circle.straggler')].map(c => c.textContent),
  scripts: document.scripts.length,
})"""


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


@pytest.fixture
def browser():
    import websocket  # websocket-client, which the kubernetes client depends on

    profile = tempfile.mkdtemp(prefix="fleetctl-chromium-")
    proc = subprocess.Popen(
        [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         f"--user-data-dir={profile}", "--remote-debugging-port=0", "--window-size=1200,900", "about:blank"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
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


def test_report_renders_in_headless_chromium(browser, sqlite_url, tmp_path) -> None:
    engine = get_engine(sqlite_url)
    history.seed(engine, NOW)
    page = tmp_path / "report.html"
    page.write_text(render_html(build_report(engine, NOW - history.WINDOW, NOW, fleet="prod")), encoding="utf-8")

    for domain in ("Page", "Runtime", "Log", "Network"):
        browser.call(f"{domain}.enable")
    browser.call("Page.navigate", url=page.as_uri())
    browser.wait_for("Page.loadEventFired")
    facts = json.loads(browser.call("Runtime.evaluate", expression=PAGE_FACTS, returnByValue=True)["result"]["value"])
    screenshot = base64.b64decode(browser.call("Page.captureScreenshot", format="png", captureBeyondViewport=True)["data"])

    errors = [e for e in browser.events if e["method"] in ("Runtime.exceptionThrown",)
              or (e["method"] == "Runtime.consoleAPICalled" and e["params"]["type"] in ("error", "assert"))
              or (e["method"] == "Log.entryAdded" and e["params"]["entry"]["level"] == "error")]
    assert errors == []
    requested = {e["params"]["request"]["url"] for e in browser.events if e["method"] == "Network.requestWillBeSent"}
    assert requested == {page.as_uri()}  # self-contained: nothing else fetched

    assert facts["title"].startswith("fleetctl report: prod")
    assert facts["scripts"] == 0
    names = [s["name"] for s in facts["svgs"]]
    assert names == ["Nodes per state over the window", "Failures by cause", "Job restart latency",
                     "hpl gflops_per_gpu per profile", "nccl-allreduce busbw_gbps per profile"]
    for svg in facts["svgs"]:
        assert svg["width"] > 300 and svg["height"] > 50 and svg["marks"] > 0, svg
    assert sorted(facts["stragglers"]) == ["n10: 140 (median 230) (straggler)", "n11: 350 (median 480) (straggler)"]

    (tmp_path / "report.png").write_bytes(screenshot)
    assert screenshot[:8] == b"\x89PNG\r\n\x1a\n"
    width, height = int.from_bytes(screenshot[16:20], "big"), int.from_bytes(screenshot[20:24], "big")
    assert width >= 1000 and height > 2000  # the whole page, plots and tables included


def test_young_fleet_report_charts_its_whole_life(browser, sqlite_url, tmp_path) -> None:
    """A fleet three hours old, its window chosen from the data as `fleetctl report` does
    without --since: the state chart has columns, and the page says which window and why."""
    from fleetctl.report import default_window, first_node_event_at
    from tests.report import young_fleet

    engine = get_engine(sqlite_url)
    young_fleet.seed(engine, NOW)
    since, basis = default_window(NOW, first_node_event_at(engine))
    page = tmp_path / "young.html"
    page.write_text(render_html(build_report(engine, since, NOW, fleet="young", window_basis=basis)), encoding="utf-8")

    browser.call("Page.enable")
    browser.call("Page.navigate", url=page.as_uri())
    browser.wait_for("Page.loadEventFired")
    facts = json.loads(browser.call("Runtime.evaluate", returnByValue=True, expression="""JSON.stringify({
      window: document.getElementById('window').innerText,
      states: document.querySelector('svg.plot[aria-label="Nodes per state over the window"]').innerHTML,
      columns: document.querySelectorAll('svg.plot[aria-label="Nodes per state over the window"] rect.bar').length,
    })""")["result"]["value"])
    assert "no data in this window" not in facts["states"] and facts["columns"] >= 60
    assert ("Window 2025-03-01 09:10:00 to 2025-03-01 12:00:00 UTC (2.83 h: since the first recorded node event"
            in facts["window"])
