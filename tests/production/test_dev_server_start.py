"""The embedded dev server starts although another process took the port it picked.

A free port is found by binding and releasing it: on a busy machine (two suites, a CI runner
beside a developer) another process can bind it before the server does, and the server exits.
The start picks its ports again; a port the caller fixed stays fixed and the error says why.
And the start is over when the frontend says it serves, not when its port accepts.
"""

from __future__ import annotations

import socket

import pytest

from fleetctl.connections import temporal_server
from fleetctl.connections.temporal_server import START_ATTEMPTS, ServerExited, start_dev_server
from fleetctl.workflows.api import SIGNALS_PER_RUN

pytestmark = pytest.mark.temporal


@pytest.fixture
def taken_port():
    """A port bound by another process (not listening: the server's own frontend must answer)."""
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        yield holder.getsockname()[1]


def test_a_picked_port_taken_in_between_is_picked_again(tmp_path, taken_port, monkeypatch) -> None:
    picks = iter([taken_port])
    real_free_port = temporal_server.free_port
    monkeypatch.setattr(temporal_server, "free_port", lambda: next(picks, None) or real_free_port())
    server = start_dev_server(tmp_path / "temporal.db")
    try:
        assert server.address != f"127.0.0.1:{taken_port}"
        with socket.create_connection(server.address.split(":"), timeout=5):
            pass
    finally:
        server.stop()


def test_a_fixed_port_that_is_taken_fails_saying_why(tmp_path, taken_port) -> None:
    with pytest.raises(ServerExited) as failed:
        start_dev_server(tmp_path / "temporal.db", port=taken_port)
    message = str(failed.value)
    assert f"after {START_ATTEMPTS} attempts" in message
    assert "address already in use" in message, message


def test_a_port_that_accepts_is_not_yet_a_serving_frontend() -> None:
    """The frontend's port accepts connections a moment before it serves ("Frontend is not
    healthy yet": a client connecting then was refused, mid-suite). The start waits for the
    health check, not the port: a listener that accepts and says nothing is never serving."""
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        port = listener.getsockname()[1]
        temporal_server.wait_for_port("127.0.0.1", port, timeout_s=2)  # the port alone says yes
        with pytest.raises(RuntimeError, match="did not say it was serving within 1s"):
            temporal_server.wait_until_serving(f"127.0.0.1:{port}", timeout_s=1)


def _dynamic_config(cmd: list[str]) -> dict[str, str]:
    values = [cmd[i + 1] for i, arg in enumerate(cmd) if arg == "--dynamic-config-value"]
    return dict(v.split("=", 1) for v in values)


def test_the_server_reads_its_transfer_queue_unthrottled_and_buffers_a_runs_signals_unless_told_otherwise(
    tmp_path,
) -> None:
    # At the default (20 reads a second a shard) every step of a drain waited behind any other
    # work on the dev server's one shard (bench/critical_lane.py).
    default = _dynamic_config(temporal_server.server_command(tmp_path / "t.db", 7233, None))
    assert default["history.transferProcessorMaxPollRPS"] == "1000"
    # A burst of signals during one workflow task no longer fails it (tests/workflows/test_bounded_run.py).
    assert int(default["history.maximumBufferedEventsBatch"]) >= SIGNALS_PER_RUN
    told = _dynamic_config(
        temporal_server.server_command(
            tmp_path / "t.db",
            7233,
            None,
            dynamic_config={"history.transferProcessorMaxPollRPS": "20", "history.maximumSignalsPerExecution": "40"},
        )
    )
    assert told["history.transferProcessorMaxPollRPS"] == "20"
    assert told["history.maximumSignalsPerExecution"] == "40"
    assert list(temporal_server.server_command(tmp_path / "t.db", 7233, None)).count("--dynamic-config-value") == len(
        default
    )
