"""A real webhook endpoint on 127.0.0.1 that keeps what it was sent."""

from __future__ import annotations

import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class WebhookReceiver(ThreadingHTTPServer):
    """Keeps (Authorization header, body) of every POST and answers `status` (the token
    must arrive, in the header). Call `shutdown()` when done."""

    def __init__(self, status: int = 204) -> None:
        self.requests: list[tuple[str, bytes]] = []
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                receiver.requests.append((self.headers.get("Authorization", ""), body))
                self.send_response(status)
                self.end_headers()

            def log_message(self, *args) -> None:
                pass

        super().__init__(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.serve_forever, daemon=True).start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}/hook"
