"""`heartbeating` activities: beats while the call blocks, cancellation reaches the call, and
no thread start can hang an activity (CPython gh-140746: `Thread.start` waits without a bound
for a new thread that died in its first instructions)."""

from __future__ import annotations

import threading

from temporalio.exceptions import CancelledError
from temporalio.testing import ActivityEnvironment

from fleetctl.workflows.activities.heartbeat import HEARTBEAT_EVERY_S, heartbeating

# What Temporal allows between beats (workflows.definitions.shared.HEARTBEAT_TIMEOUT).
HEARTBEAT_TIMEOUT_S = 5 * HEARTBEAT_EVERY_S


def test_a_blocking_call_is_heartbeaten_until_it_returns() -> None:
    env = ActivityEnvironment()
    beats = threading.Semaphore(0)
    env.on_heartbeat = lambda *details: beats.release()

    @heartbeating
    def blocking_call() -> str:
        # Returns once two beats came while it blocked: they come from another thread.
        for _ in range(2):
            assert beats.acquire(timeout=HEARTBEAT_TIMEOUT_S), "no heartbeat within the heartbeat timeout"
        return "done"

    assert env.run(blocking_call) == "done"


def test_cancellation_reaches_the_call_itself() -> None:
    env = ActivityEnvironment()
    reached = threading.Event()
    started = threading.Event()

    @heartbeating
    def blocking_call() -> None:
        started.set()
        try:
            while True:  # Python code: where an exception raised into the thread lands
                threading.Event().wait(0.05)
        except CancelledError:
            reached.set()
            raise

    outcome: dict = {}

    def run() -> None:
        try:
            env.run(blocking_call)
        except BaseException as exc:  # noqa: BLE001 - what the activity ended with
            outcome["error"] = exc

    runner = threading.Thread(target=run, daemon=True)
    runner.start()
    assert started.wait(HEARTBEAT_TIMEOUT_S)
    env.cancel()
    runner.join(HEARTBEAT_TIMEOUT_S)
    assert reached.is_set(), "the cancellation did not reach the blocking call"
    assert isinstance(outcome.get("error"), CancelledError)


def test_a_thread_that_dies_as_it_starts_cannot_hang_an_activity(monkeypatch) -> None:
    go, done = threading.Event(), threading.Event()
    result: dict = {}

    @heartbeating
    def quick_call() -> int:
        return 42

    def run() -> None:
        go.wait()
        result["value"] = ActivityEnvironment().run(quick_call)
        done.set()

    threading.Thread(target=run, daemon=True).start()

    def dies_starting(self) -> None:
        raise SystemExit  # what thread_run() swallows: the thread is gone, never "started"

    # Every thread started from here on dies before it says it started.
    monkeypatch.setattr(threading.Thread, "_bootstrap_inner", dies_starting)
    go.set()
    assert done.wait(HEARTBEAT_TIMEOUT_S), "the activity hung starting a thread"
    assert result["value"] == 42
