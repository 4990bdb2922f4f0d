"""`fleetctl dev server` in a real terminal (tmux), stopped with Ctrl-C while a worker polls it
and workflows tick: the server stops, and the terminal shows one line saying so, not the
server's own ERROR line per poll it was still holding."""

from __future__ import annotations

import re
import socket
import subprocess
import sys
import textwrap
from datetime import datetime

import pytest

from fleetctl.cli.dev import STOP_S
from fleetctl.connections.temporal_server import free_port, wait_for_port, wait_until_serving
from tests.support.terminal import COMMAND_S, FLEETCTL, Terminal

# Workflows each waking every 50 ms on one worker with many pollers: polls and tasks in flight
# whenever Ctrl-C comes (what the demo's fleet keeps the server busy with).
BUSY_WORKER = textwrap.dedent(
    """
    import asyncio, sys
    from temporalio import workflow
    from temporalio.client import Client
    from temporalio.worker import UnsandboxedWorkflowRunner, Worker

    WORKFLOWS, TICKS = 100, 40

    @workflow.defn
    class Ticking:
        @workflow.run
        async def run(self) -> None:
            for _ in range(100_000):
                await workflow.sleep(0.05)

    async def main() -> None:
        client = await Client.connect(sys.argv[1])
        for i in range(WORKFLOWS):
            await client.start_workflow(Ticking.run, id=f"ticking-{i}", task_queue="busy")
        worker = Worker(
            client,
            task_queue="busy",
            workflows=[Ticking],
            max_concurrent_workflow_task_polls=20,
            workflow_runner=UnsandboxedWorkflowRunner(),
        )
        running = asyncio.create_task(worker.run())
        last = client.get_workflow_handle(f"ticking-{WORKFLOWS - 1}")
        while len((await last.fetch_history()).events) < TICKS:  # the last one started ticks
            await asyncio.sleep(0.1)
        print("ticking", flush=True)
        await running

    asyncio.run(main())
    """
)


_STAMP = re.compile(r"^time=(\S+) level=")


def _logged_before(line: str, moment: datetime) -> bool:
    """Whether `line` is a server log line stamped before `moment`."""
    stamp = _STAMP.match(line)
    return stamp is not None and datetime.fromisoformat(stamp.group(1)) < moment


@pytest.mark.temporal
def test_ctrl_c_stops_the_dev_server_in_one_line(tmp_path) -> None:
    port, ui_port = free_port(), free_port()
    term = Terminal(columns=120, lines=40)
    worker = None
    try:
        # The shell survives the Ctrl-C (as an operator's interactive one does) to say the status.
        term.start(
            f"trap : INT; {FLEETCTL} dev server --port {port} --ui-port {ui_port} --db-filename {tmp_path / 't.db'}"
        )
        wait_for_port("127.0.0.1", port, timeout_s=COMMAND_S)
        wait_until_serving(f"127.0.0.1:{port}")
        worker = subprocess.Popen(
            [sys.executable, "-c", BUSY_WORKER, f"127.0.0.1:{port}"], stdout=subprocess.PIPE, text=True
        )
        assert worker.stdout is not None and worker.stdout.readline() == "ticking\n"  # busy
        before = len(term.scrollback())
        interrupted = datetime.now()  # the server stamps its lines in local time
        term.tmux("send-keys", "C-c")
        screen = term.wait_screen(lambda s: "[exited" in s, STOP_S + COMMAND_S, "fleetctl to end")
        # What came after the Ctrl-C, less what the server said before it: a server this loaded
        # logs its own timeouts while it runs, and fleetctl shows those as they come.
        after = [line for line in term.scrollback()[before:] if line and not _logged_before(line, interrupted)]
        assert "[exited 0]" in screen, screen
        assert "Temporal dev server stopped" in screen, screen
        assert not [line for line in after if "level=" in line], after  # none of its lines from its stop
        assert len(after) <= 2, after
        with pytest.raises(ConnectionRefusedError):  # the server is gone
            socket.create_connection(("127.0.0.1", port), timeout=COMMAND_S).close()
    finally:
        if worker is not None:
            worker.kill()
            worker.wait()
        term.stop()
