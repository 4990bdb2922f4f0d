"""A scripted Redfish service over real HTTP, for what sushy-tools' emulator cannot do.

The emulator serves no FirmwareInventory, its SimpleUpdate fails with the fake driver and
its one task is always Completed (see sushy_emulator.py). Inventory parsing, a task that runs
and then completes or fails, boot ids and cross-host links are therefore tested against
canned answers, written the way real BMCs (OpenBMC, iDRAC) send them.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass
class Answer:
    status: int
    body: dict[str, Any] | None = None
    headers: dict[str, str] = field(default_factory=dict)


@dataclass
class RecordedRequest:
    method: str
    path: str
    body: Any


class ScriptedRedfish:
    """Answers each (method, path) from its script in order; the last answer repeats."""

    def __init__(self) -> None:
        self.base_url = ""
        self.requests: list[RecordedRequest] = []
        self._scripts: dict[tuple[str, str], list[Answer]] = {}

    def script(self, method: str, path: str, *answers: Answer) -> None:
        self._scripts[(method, path)] = list(answers)

    def _next_answer(self, method: str, path: str) -> Answer:
        script = self._scripts.get((method, path))
        if not script:
            return Answer(404, {"error": {"message": f"{path} not found"}})
        return script.pop(0) if len(script) > 1 else script[0]

    @contextmanager
    def serving(self) -> Iterator[ScriptedRedfish]:
        stub = self

        class Handler(BaseHTTPRequestHandler):
            def _answer(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length) if length else b""
                stub.requests.append(RecordedRequest(self.command, self.path, json.loads(raw) if raw else None))
                answer = stub._next_answer(self.command, self.path)
                payload = json.dumps(answer.body).encode() if answer.body is not None else b""
                self.send_response(answer.status)
                for name, value in answer.headers.items():
                    self.send_header(name, value)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

            do_GET = do_POST = do_PUT = _answer

            def log_message(self, format: str, *args: Any) -> None:
                pass  # the test asserts on stub.requests; stderr noise helps nobody

        server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
        thread.start()
        self.base_url = f"http://127.0.0.1:{server.server_address[1]}"
        try:
            yield self
        finally:
            server.shutdown()
            server.server_close()
            thread.join(timeout=5)
