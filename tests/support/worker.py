"""A fleetctl worker running in a background thread, for tests that drive the CLI."""

from __future__ import annotations

import asyncio
import threading

from fleetctl.config import Settings


class WorkerThread:
    def __init__(self, settings: Settings):
        self.settings = settings
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None
        self._ready = threading.Event()
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._main, name="fleetctl-test-worker", daemon=True)

    def _main(self) -> None:
        from workflows.worker import run_worker

        async def body() -> None:
            self._loop = asyncio.get_running_loop()
            self._stop = asyncio.Event()
            self._ready.set()
            await run_worker(self.settings, self._stop)

        try:
            asyncio.run(body())
        except BaseException as exc:  # noqa: BLE001 - surfaced to the test in stop()
            self._error = exc
            self._ready.set()

    def start(self) -> "WorkerThread":
        self._thread.start()
        self._ready.wait(30)
        return self

    def stop(self) -> None:
        if self._loop and self._stop:
            self._loop.call_soon_threadsafe(self._stop.set)
        self._thread.join(30)
        if self._error:
            raise self._error
