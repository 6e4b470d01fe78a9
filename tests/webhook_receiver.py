"""A plain HTTP receiver on 127.0.0.1 for tests: keeps every POST it gets (an alert sink, or
Alertmanager's webhook target) and answers 200."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


class WebhookReceiver:
    """`url` takes POSTs; `received` keeps (headers, raw body) in arrival order."""

    def __init__(self, path: str = "/hook") -> None:
        self.received: list[tuple[dict[str, str], bytes]] = []
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("content-length", "0")))
                receiver.received.append((dict(self.headers), body))
                self.send_response(200)
                self.send_header("content-length", "0")
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}{path}"
        # `close` waits for the loop's next poll: every 10 ms rather than the default 0.5 s.
        self._thread = threading.Thread(
            target=self.server.serve_forever, kwargs={"poll_interval": 0.01}, daemon=True
        )
        self._thread.start()

    @property
    def bodies(self) -> list[Any]:
        """Every body received, parsed as JSON."""
        return [json.loads(body) for _headers, body in list(self.received)]

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
