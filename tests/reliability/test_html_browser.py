"""The HTML report in a real headless Chromium, driven over the DevTools protocol: no console
errors, no request leaves the file, every plot is an SVG with a size, stragglers are marked,
and a screenshot comes out."""

from __future__ import annotations

import json
from datetime import UTC, datetime

from fleetctl.db.engine import get_engine
from fleetctl.reliability.report import render_html
from fleetctl.reliability.report_store import build_report
from tests.reliability import history
from tests.support.browser import PNG_SIGNATURE, browser  # noqa: F401 (browser: the fixture)

NOW = datetime(2025, 3, 1, 12, 0, tzinfo=UTC)


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


def test_report_renders_in_headless_chromium(browser, sqlite_url, tmp_path) -> None:
    engine = get_engine(sqlite_url)
    history.seed(engine, NOW)
    page = tmp_path / "report.html"
    page.write_text(render_html(build_report(engine, NOW - history.WINDOW, NOW, fleet="prod")), encoding="utf-8")

    for domain in ("Page", "Runtime", "Log", "Network"):
        browser.call(f"{domain}.enable")
    browser.call("Page.navigate", url=page.as_uri())
    browser.wait_for("Page.loadEventFired")
    facts = json.loads(browser.evaluate(PAGE_FACTS))
    screenshot = browser.screenshot()

    errors = [
        e
        for e in browser.events
        if e["method"] in ("Runtime.exceptionThrown",)
        or (e["method"] == "Runtime.consoleAPICalled" and e["params"]["type"] in ("error", "assert"))
        or (e["method"] == "Log.entryAdded" and e["params"]["entry"]["level"] == "error")
    ]
    assert errors == []
    requested = {e["params"]["request"]["url"] for e in browser.events if e["method"] == "Network.requestWillBeSent"}
    assert requested == {page.as_uri()}  # self-contained: nothing else fetched

    assert facts["title"].startswith("fleetctl report: prod")
    assert facts["scripts"] == 0
    names = [s["name"] for s in facts["svgs"]]
    assert names == [
        "Nodes per state over the window",
        "Failures by cause",
        "Job restart latency",
        "hpl gflops_per_gpu per profile",
        "nccl-allreduce busbw_gbps per profile",
    ]
    for svg in facts["svgs"]:
        assert svg["width"] > 300 and svg["height"] > 50 and svg["marks"] > 0, svg
    assert sorted(facts["stragglers"]) == ["n10: 140 (median 230) (straggler)", "n11: 350 (median 480) (straggler)"]

    (tmp_path / "report.png").write_bytes(screenshot)
    assert screenshot[:8] == PNG_SIGNATURE
    width, height = int.from_bytes(screenshot[16:20], "big"), int.from_bytes(screenshot[20:24], "big")
    assert width >= 1000 and height > 2000  # the whole page, plots and tables included


def test_young_fleet_report_charts_its_whole_life(browser, sqlite_url, tmp_path) -> None:
    """A fleet three hours old, its window chosen from the data as `fleetctl report` does
    without --since: the state chart has columns, and the page says which window and why."""
    from fleetctl.reliability.report import default_window
    from fleetctl.reliability.report_store import first_node_event_at
    from tests.reliability import young_fleet

    engine = get_engine(sqlite_url)
    young_fleet.seed(engine, NOW)
    since, basis = default_window(NOW, first_node_event_at(engine))
    page = tmp_path / "young.html"
    page.write_text(render_html(build_report(engine, since, NOW, fleet="young", window_basis=basis)), encoding="utf-8")

    browser.call("Page.enable")
    browser.call("Page.navigate", url=page.as_uri())
    browser.wait_for("Page.loadEventFired")
    facts = json.loads(
        browser.call(
            "Runtime.evaluate",
            returnByValue=True,
            expression="""JSON.stringify({
      window: document.getElementById('window').innerText,
      states: document.querySelector('svg.plot[aria-label="Nodes per state over the window"]').innerHTML,
      columns: document.querySelectorAll('svg.plot[aria-label="Nodes per state over the window"] rect.bar').length,
    })""",
        )["result"]["value"]
    )
    assert "no data in this window" not in facts["states"] and facts["columns"] >= 60
    assert (
        "Window 2025-03-01 09:10:00 to 2025-03-01 12:00:00 UTC (2.83 h: since the first recorded node event"
        in facts["window"]
    )
