"""Heartbeat while a blocking call runs: a worker that dies mid call is then noticed within
the caller's heartbeat timeout (seconds), not when its start-to-close runs out.

The call runs in the activity's own thread, so a cancellation Temporal raises into that
thread reaches the call (the SSH executor then kills the remote command). One daemon thread
per process heartbeats every call in flight. It is started with `_thread.start_new_thread`,
not `threading.Thread.start`: the latter waits, without a bound, for the new thread to say it
started, and a thread that dies in its first instructions (CPython gh-140746) left an
activity blocked for good and the worker's shutdown with it. Should the heartbeating thread
ever be lost, the calls stop heartbeating and Temporal times them out and retries them:
a bounded failure instead of a hang.
"""

from __future__ import annotations

import _thread
import contextvars
import functools
import itertools
import logging
import threading
import time
from collections.abc import Callable
from typing import ParamSpec, TypeVar

from temporalio import activity

T = TypeVar("T")
P = ParamSpec("P")
# Callers' heartbeat timeout (workflows.definitions.shared.HEARTBEAT_TIMEOUT) is five of these.
HEARTBEAT_EVERY_S = 2.0

log = logging.getLogger(__name__)


class _Heartbeater:
    """Heartbeats each registered activity (by its copied context) every HEARTBEAT_EVERY_S."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._calls: dict[int, contextvars.Context] = {}
        self._tokens = itertools.count()
        self._started = False

    def register(self, context: contextvars.Context) -> int:
        with self._lock:
            token = next(self._tokens)
            self._calls[token] = context
            if not self._started:
                _thread.start_new_thread(self._beat_forever, ())
                self._started = True
        return token

    def unregister(self, token: int) -> None:
        with self._lock:
            self._calls.pop(token, None)

    def _beat_forever(self) -> None:
        while True:
            time.sleep(HEARTBEAT_EVERY_S)
            with self._lock:
                contexts = list(self._calls.values())
            for context in contexts:
                try:
                    # Thread-safe: a sync activity's heartbeat hands the beat to the worker's loop.
                    context.run(activity.heartbeat)
                except Exception:
                    log.exception("heartbeat failed")


_HEARTBEATER = _Heartbeater()


def run_heartbeating(call: Callable[[], T]) -> T:
    """Run `call` in this activity's thread, heartbeating from the process's heartbeat thread
    until it returns; its result, or its exception."""
    token = _HEARTBEATER.register(contextvars.copy_context())
    try:
        return call()
    finally:
        _HEARTBEATER.unregister(token)


def heartbeating(fn: Callable[P, T]) -> Callable[P, T]:
    """A sync activity that heartbeats while its body runs (put it under @activity.defn)."""

    @functools.wraps(fn)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> T:
        return run_heartbeating(lambda: fn(*args, **kwargs))

    return wrapper
