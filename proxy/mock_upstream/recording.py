"""What the mock received: the last N requests and a count per path.

Tests of the gateway read it back through `GET /_mock/requests` to check what was forwarded
upstream (headers, injected `stream_options`, rewritten model names). Recording is an append to a
bounded deque of references to the already-parsed body; benchmarks switch it off.
"""

from __future__ import annotations

from collections import Counter, deque
from typing import Any


class RequestRecorder:
    """Bounded memory of received requests, plus per-path counts (always kept)."""

    def __init__(self, limit: int, enabled: bool = True) -> None:
        self.enabled = enabled
        self._requests: deque[dict[str, Any]] = deque(maxlen=limit)
        self.paths: Counter[str] = Counter()
        """Requests received per path, whether recording is on or not."""

    def record(
        self,
        method: str,
        path: str,
        headers: list[tuple[bytes, bytes]],
        body: Any,
        raw: bytes = b"",
    ) -> None:
        """Count the request, and keep it when recording is on.

        Header names arrive lowercased (ASGI); a repeated header keeps its last value. `raw` is
        the body as received (`raw` in the record, as text): what was sent, byte for byte, where
        the parsed `body` would have turned an integer beyond 64 bits into a float.
        """
        self.paths[path] += 1
        if self.enabled:
            self._requests.append(
                {
                    "method": method,
                    "path": path,
                    "headers": {k.decode("latin-1"): v.decode("latin-1") for k, v in headers},
                    "body": body,
                    "raw": raw.decode("utf-8", errors="replace"),
                }
            )

    def requests(self) -> list[dict[str, Any]]:
        """The kept requests, oldest first: `{method, path, headers, body}`."""
        return list(self._requests)

    def clear(self) -> None:
        self._requests.clear()
        self.paths.clear()
