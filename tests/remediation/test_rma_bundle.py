"""Evidence bundles keep secrets out; the webhook carries the token only in its header."""

from __future__ import annotations

import json
import logging
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from fleetctl.rma import post_webhook, redact


def test_redact_masks_credentials_everywhere() -> None:
    bundle = {"labels": {"note": "bmc password=hunter2 ok"},
              "out": ["curl https://admin:s3cret@bmc.example/redfish", "Authorization: Bearer abc.def"],
              "raw": "the configured token TOKEN-123 leaked"}
    clean = json.dumps(redact(bundle, ["TOKEN-123"]))
    for secret in ("hunter2", "s3cret", "abc.def", "TOKEN-123"):
        assert secret not in clean
    assert "https://admin:***@bmc.example/redfish" in clean


def test_webhook_posts_json_with_bearer_token_and_never_logs_it(caplog) -> None:
    received = {}

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self):  # noqa: N802
            received["auth"] = self.headers["Authorization"]
            received["body"] = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            self.send_response(201)
            self.end_headers()

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}/hook?token=SECRET-T"
        with caplog.at_level(logging.DEBUG):
            status = post_webhook(url, "SECRET-T", {"kind": "rma", "rma_id": 7})
    finally:
        server.shutdown()
    assert status == "delivered: HTTP 201"
    assert received == {"auth": "Bearer SECRET-T", "body": {"kind": "rma", "rma_id": 7}}
    assert "SECRET-T" not in caplog.text and "delivered" in caplog.text


def test_webhook_failure_is_a_status_not_an_exception() -> None:
    assert post_webhook("http://127.0.0.1:9/nowhere", "T", {}, timeout_s=2).startswith("failed:")
