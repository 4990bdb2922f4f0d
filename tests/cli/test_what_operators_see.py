"""What a person sees, seen as they see it: `fleet status --watch` in a real terminal (tmux,
read back with capture-pane) and a node's page in the Temporal UI (headless Chromium), each
checked for the nodes' states and the cause an operator gave."""

from __future__ import annotations

import asyncio
import time
import urllib.parse

import pytest

from fleetctl.connections.temporal_server import TemporalBinaryMissing, start_dev_server
from fleetctl.db import queries
from fleetctl.db.engine import get_engine
from fleetctl.workflows.api import node_workflow_id
from fleetctl.workflows.client import connect
from tests.support.browser import PNG_SIGNATURE, browser  # noqa: F401 (browser: the fixture)
from tests.support.fleet import Cli, wait_for
from tests.support.services import missing_service
from tests.support.sim_fleet import make_fleet
from tests.support.terminal import Terminal, fleetctl
from tests.support.worker import WorkerThread, start_in_production

pytestmark = pytest.mark.temporal

WATCH_INTERVAL_S = 0.5
# A frame every interval: twenty of them allow for a shared, loaded machine, where one read of
# the database and the capacity guard can take seconds.
NEXT_FRAME_S = 20 * WATCH_INTERVAL_S
# Before its first frame the CLI imports its modules and asks Temporal once: seconds when idle,
# several times that with the suite running on two cores.
FIRST_FRAME_S = 30.0
# The node drains with no jobs and no runbook (it waits in maintenance): a handful of activities.
DRAINED_S = 60.0


async def drained(cli: Cli, engine, name: str, reason: str) -> None:
    result = await asyncio.to_thread(cli, "node", "drain", name, "--reason", reason, "--yes")
    assert result.exit_code == 0, result.output
    await wait_for(lambda: queries.get_node(engine, name).state == "maintenance", DRAINED_S, f"{name} in maintenance")


@pytest.fixture
def tmux():
    terminal = Terminal(160, 50)
    yield terminal
    terminal.stop()


def state_counts(screen: str) -> str:
    """The head line of `fleet status`: `fleet N nodes   production 2  maintenance 1 ...`."""
    return next((line for line in screen.splitlines() if line.startswith("fleet ")), "")


def shows(screen: str, cause: str, *counts: str) -> bool:
    """A frame drawn after the drain settled: its cause in view and the fleet's counts moved.

    The cause is on record from the command, while the node is still draining: a frame may fall
    between the two, and the next one shows where the node settled.
    """
    return cause in screen and all(count in state_counts(screen) for count in counts)


async def test_fleet_status_watch_in_a_terminal_shows_each_drain_with_its_cause(
    tmux, make_settings, sqlite_url, tmp_path
) -> None:
    settings = make_settings(sqlite_url)
    settings.runbooks_dir = str(tmp_path)  # no runbook: a drained node waits in maintenance
    engine = get_engine(settings.db_url)
    cli = Cli(settings)
    worker = WorkerThread(settings).start()
    try:
        first, second, third = make_fleet(settings, 3)
        client = await connect(settings)
        for name in (first, second, third):
            await start_in_production(client, settings, name)
        await drained(cli, engine, first, "swap optics")

        tmux.start(
            fleetctl(
                settings.db_url, "fleet", "status", "--watch", "--interval", str(WATCH_INTERVAL_S), temporal=settings
            )
        )
        # Polled in a thread: the worker and this test's client keep their event loop meanwhile.
        screen = await asyncio.to_thread(
            tmux.wait_screen,
            lambda s: shows(s, "swap optics", "production 2", "maintenance 1"),
            FIRST_FRAME_S,
            "the first frame",
        )
        assert "[exited" not in screen

        await drained(cli, engine, second, "reseat cable")
        screen = await asyncio.to_thread(
            tmux.wait_screen,
            lambda s: shows(s, "reseat cable", "production 1", "maintenance 2"),
            NEXT_FRAME_S,
            "the frame after the drain",
        )
        assert "swap optics" in screen  # the first cause stays in view
        assert "[exited" not in screen  # still watching: the same process drew both frames
    finally:
        worker.stop()


@pytest.fixture
def temporal_with_ui(tmp_path):
    """A dev server of the test's own with its web UI (the session's runs headless)."""
    try:
        server = start_dev_server(tmp_path / "temporal-ui.db", ui=True)
    except TemporalBinaryMissing as exc:
        missing_service("the Temporal dev server", str(exc))
    yield server
    server.stop()


# The UI renders the current details (Markdown) in a same-origin frame of their own.
CURRENT_DETAILS = "document.getElementById('user-metadata-current-details')?.contentDocument?.body?.innerText || ''"
# The UI is a single-page app: the page loads, then its scripts ask the server for the
# workflow and render it. Seconds on an idle machine; bounded for a loaded one.
UI_RENDER_S = 30.0


async def test_temporal_ui_node_page_shows_state_and_cause(
    browser, temporal_with_ui, make_settings, sqlite_url, tmp_path
) -> None:
    settings = make_settings(sqlite_url)
    settings.temporal_address = temporal_with_ui.address
    settings.runbooks_dir = str(tmp_path)  # no runbook: the drained node waits in maintenance
    engine = get_engine(settings.db_url)
    worker = WorkerThread(settings).start()
    try:
        (name,) = make_fleet(settings, 1)
        client = await connect(settings)
        await start_in_production(client, settings, name)
        await drained(Cli(settings), engine, name, "swap optics")
        # The UI asks the workflow for its current details with a query: a worker answers it.
        run_id = (await client.get_workflow_handle(node_workflow_id(name)).describe()).run_id

        # The node page's User Metadata tab: its summary and current details.
        url = (
            f"{temporal_with_ui.ui_address}/namespaces/{settings.temporal_namespace}/workflows/"
            f"{urllib.parse.quote(node_workflow_id(name), safe='')}/{run_id}/user-metadata"
        )
        browser.call("Page.enable")
        browser.call("Page.navigate", url=url)
        browser.wait_for("Page.loadEventFired", timeout=UI_RENDER_S)
        deadline = time.monotonic() + UI_RENDER_S
        while True:
            text = browser.evaluate(CURRENT_DETAILS)
            if "maintenance" in text and "swap optics" in text:
                break
            if time.monotonic() > deadline:
                raise AssertionError(
                    f"the node page at {url} never showed the state and cause; its current details read:\n{text}"
                )
            await asyncio.sleep(0.2)

        screenshot = browser.screenshot()
    finally:
        worker.stop()
    shown = [line for line in text.splitlines() if line.strip()]
    assert shown[0].startswith("maintenance since "), text
    assert shown[1:] == ["last cause: drained: operator: swap optics"], text
    (tmp_path / "node-page.png").write_bytes(screenshot)
    assert screenshot[:8] == PNG_SIGNATURE and len(screenshot) > 1000
