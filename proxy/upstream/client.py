"""The upstream models: one keep-alive client per configured model.

The client rewrites nothing in the body; it only decides the URL, swaps in the model's credentials
and drops the headers that must not cross a proxy.

Credentials are explicit. A model with its own key (`api_key_env`) sends that key and never the
client's. A model without one sends the client's `Authorization`, `x-api-key` and `api-key` only
with `pass_client_key: true`, and only on calls made for a client (not the judge's or a
replay's); otherwise it sends none. `Cookie` never goes upstream.
"""

from __future__ import annotations

import os
import ssl
from collections.abc import Iterable, Mapping

from proxy.config import LimitsSpec, ModelSpec

from .http11 import ResponseLimits, UpstreamHTTP, UpstreamResponse

HOP_BY_HOP = frozenset(
    {
        "connection", "keep-alive", "proxy-authenticate", "proxy-authorization", "te", "trailer",
        "transfer-encoding", "upgrade", "host", "content-length", "accept-encoding",
        "content-encoding",
    }
)  # fmt: skip
"""Headers that describe one connection, not the message; never forwarded either way."""

_CREDENTIALS = frozenset({"authorization", "x-api-key", "api-key"})
_NEVER_FORWARDED = frozenset({"cookie"})
"""A browser's cookies for the gateway are nobody upstream's business."""


def shared_ssl_context() -> ssl.SSLContext:
    """A verifying TLS context to share between every upstream client of a gateway (loading the
    CA bundle costs ~40 ms per context)."""
    return ssl.create_default_context()


def response_limits(limits: LimitsSpec) -> ResponseLimits:
    """The transport's caps on upstream answers, from `server.limits`."""
    return ResponseLimits(
        header_bytes=limits.max_upstream_header_bytes,
        headers=limits.max_upstream_headers,
        body_bytes=limits.max_response_bytes,
        stream_bytes=limits.max_stream_bytes,
        stream_s=limits.max_stream_duration_s,
    )


class UpstreamClient:
    """Sends requests to one configured model."""

    def __init__(
        self,
        name: str,
        spec: ModelSpec,
        env: Mapping[str, str] | None = None,
        ssl_context: ssl.SSLContext | None = None,
        limits: LimitsSpec | None = None,
    ) -> None:
        """`limits`: the gateway's `server.limits` (its upstream caps); defaults if None."""
        self.name = name
        self.spec = spec
        env = os.environ if env is None else env
        key = env.get(spec.api_key_env) if spec.api_key_env else None
        auth: dict[str, str] = {}
        if key:
            auth = (
                {"x-api-key": key}
                if spec.provider == "anthropic"
                else {"authorization": f"Bearer {key}"}
            )
        self.origin = spec.origin
        self._own_key = bool(spec.api_key_env)
        extra = {k.lower(): v for k, v in spec.headers.items()}
        self._dropped = HOP_BY_HOP | _NEVER_FORWARDED | frozenset(extra)
        self._added = [(k.encode(), v.encode()) for k, v in {**auth, **extra}.items()]
        self._added.append((b"accept-encoding", b"identity"))
        self.http = UpstreamHTTP(
            spec.base_url,
            connect_timeout_s=spec.connect_timeout_s,
            read_timeout_s=spec.timeout_s,
            max_connections=spec.max_connections,
            ssl_context=ssl_context,
            limits=response_limits(limits or LimitsSpec()),
        )

    def passes_client_key(self, credentials_for: str | None) -> bool:
        """Whether the client's credentials go to this model on a call made for a client whose
        credentials were meant for the origin `credentials_for` (None: the call carries no
        client's, as the judge's and replays' do). Only `pass_client_key: true` forwards them:
        the origin is not a licence (`check-config` warns about a fallback, shadow or canary
        that would get them for another host)."""
        if self._own_key or credentials_for is None:
            return False
        return self.spec.pass_client_key

    def headers(
        self, client_headers: Iterable[tuple[bytes, bytes]], credentials_for: str | None = None
    ) -> list[tuple[bytes, bytes]]:
        """The headers to send upstream, built from the client's; the client's credentials
        stay out unless `passes_client_key(credentials_for)`."""
        out: list[tuple[bytes, bytes]] = []
        dropped = self._dropped
        if not self.passes_client_key(credentials_for):
            dropped = dropped | _CREDENTIALS
        for raw_name, value in client_headers:
            name = raw_name.decode("latin-1").lower()
            if name in dropped or name.startswith("x-mirrorgate-"):
                continue
            out.append((raw_name, value))
        out.extend(self._added)
        if self.spec.provider == "anthropic" and not any(
            n.lower() == b"anthropic-version" for n, _ in out
        ):
            out.append((b"anthropic-version", b"2023-06-01"))
        return out

    async def send(
        self,
        upstream_path: str,
        body: bytes,
        client_headers: Iterable[tuple[bytes, bytes]],
        credentials_for: str | None = None,
    ) -> UpstreamResponse:
        """POST `body` to the model; returns once the response head arrived (`headers` says
        what `credentials_for` means)."""
        headers = self.headers(client_headers, credentials_for)
        return await self.http.send("POST", upstream_path, headers, body)

    async def aclose(self) -> None:
        await self.http.aclose()
