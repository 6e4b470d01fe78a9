"""HTTP clients for the upstream models: one pooled client per configured model.

The client rewrites nothing in the body; it only decides the URL, swaps in the model's credentials
and drops the headers that must not cross a proxy.
"""

from __future__ import annotations

import os
import ssl
from collections.abc import Iterable, Mapping

import httpx

from proxy.config import ModelSpec

HOP_BY_HOP = frozenset(
    {
        "connection", "keep-alive", "proxy-authenticate", "proxy-authorization", "te", "trailer",
        "transfer-encoding", "upgrade", "host", "content-length", "accept-encoding",
        "content-encoding",
    }
)  # fmt: skip
"""Headers that describe one connection, not the message; never forwarded either way."""

_CREDENTIALS = frozenset({"authorization", "x-api-key", "api-key"})


def shared_ssl_context() -> ssl.SSLContext:
    """A verifying TLS context to share between every upstream client of a gateway."""
    return ssl.create_default_context()


class UpstreamClient:
    """Sends requests to one configured model."""

    def __init__(
        self,
        name: str,
        spec: ModelSpec,
        env: Mapping[str, str] | None = None,
        transport: httpx.AsyncBaseTransport | None = None,
        ssl_context: ssl.SSLContext | None = None,
    ) -> None:
        self.name = name
        self.spec = spec
        env = os.environ if env is None else env
        key = env.get(spec.api_key_env) if spec.api_key_env else None
        self._auth: dict[str, str] = {}
        if key:
            self._auth = (
                {"x-api-key": key}
                if spec.provider == "anthropic"
                else {"authorization": f"Bearer {key}"}
            )
        self._extra = {k.lower(): v for k, v in spec.headers.items()}
        self.client = httpx.AsyncClient(
            timeout=httpx.Timeout(spec.timeout_s, connect=spec.connect_timeout_s),
            limits=httpx.Limits(
                max_connections=spec.max_connections,
                max_keepalive_connections=spec.max_connections,
                keepalive_expiry=30.0,
            ),
            transport=transport,
            follow_redirects=False,
            # One CA bundle load for all models (it costs ~40 ms each); plain http needs none.
            verify=ssl_context if ssl_context is not None else True,
        )

    def headers(self, client_headers: Iterable[tuple[bytes, bytes]]) -> list[tuple[bytes, bytes]]:
        """The headers to send upstream, built from the client's."""
        out: list[tuple[bytes, bytes]] = []
        for raw_name, value in client_headers:
            name = raw_name.decode("latin-1").lower()
            if name in HOP_BY_HOP or name.startswith("x-mirrorgate-") or name in self._extra:
                continue
            if self._auth and name in _CREDENTIALS:
                continue
            out.append((raw_name, value))
        out.extend((k.encode(), v.encode()) for k, v in self._auth.items())
        out.extend((k.encode(), v.encode()) for k, v in self._extra.items())
        out.append((b"accept-encoding", b"identity"))
        return out

    def build(
        self, upstream_path: str, body: bytes, client_headers: Iterable[tuple[bytes, bytes]]
    ) -> httpx.Request:
        headers = self.headers(client_headers)
        if self.spec.provider == "anthropic" and not any(
            n.lower() == b"anthropic-version" for n, _ in headers
        ):
            headers.append((b"anthropic-version", b"2023-06-01"))
        return self.client.build_request(
            "POST", self.spec.base_url + upstream_path, content=body, headers=headers
        )

    async def aclose(self) -> None:
        await self.client.aclose()
