"""Heartbeat while a blocking call runs: a worker that dies mid call is then noticed within
the caller's heartbeat timeout (seconds), not when its start-to-close runs out."""

from __future__ import annotations

import contextvars
import functools
import threading
from typing import Callable, TypeVar

from temporalio import activity

T = TypeVar("T")
# Callers' heartbeat timeout (workflows.definitions.shared.HEARTBEAT_TIMEOUT) is five of these.
HEARTBEAT_EVERY_S = 2.0


def run_heartbeating(call: Callable[[], T], name: str) -> T:
    """Run `call` in a thread of its own (with this activity's context) and heartbeat from
    the activity's thread until it returns; its result, or its exception re-raised."""
    box: dict = {}
    context = contextvars.copy_context()

    def body() -> None:
        try:
            box["result"] = context.run(call)
        except BaseException as exc:  # noqa: BLE001 - re-raised in the activity thread
            box["error"] = exc

    thread = threading.Thread(target=body, name=name, daemon=True)
    thread.start()
    while thread.is_alive():
        thread.join(HEARTBEAT_EVERY_S)
        if thread.is_alive():
            activity.heartbeat()
    if "error" in box:
        raise box["error"]
    return box["result"]


def heartbeating(fn: Callable[..., T]) -> Callable[..., T]:
    """A sync activity that heartbeats while its body runs (put it under @activity.defn)."""

    @functools.wraps(fn)
    def wrapper(*args, **kwargs) -> T:
        return run_heartbeating(lambda: fn(*args, **kwargs), f"{fn.__name__}-heartbeating")

    return wrapper
