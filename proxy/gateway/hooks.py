"""The client path's hooks: what the exchange announces, for observers it never imports.

The exchange calls every observer it was built with, in order, at three moments of each proxied
request:

- `request_planned(ctx, plan)`: the request is valid, its route, arm and rule version are known,
  and no upstream has been called yet;
- `exchange_finished(done)`: one upstream attempt of the client path has its record. An attempt
  abandoned for the fallback comes first with `final=False`; the attempt whose answer the client
  got comes last with `final=True`;
- `request_closed(ctx)`: the client path is over, whatever ended it (always called once after
  `request_planned`, also when no attempt finished).
- `request_refused(refusal)`: the request was answered with an error of the gateway's own
  before it had a route (malformed, unknown route, too large, wrong content type); none of the
  other hooks is called for it.

Observers run on the event loop, inside the client's request: each must return at once (queue
the work, spawn a task), and never raises on purpose. One that raises is logged and counted in
`mirrorgate_internal_errors_total{component="hook"}`; the client and the other observers are
unaffected. Shadows and the analysis worker (`proxy.mirror`) are observers.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from opentelemetry.trace import SpanContext

from proxy.core import Endpoint, ExchangeRecord, GatewayError
from proxy.upstream import CallContext

from .routing import RoutePlan


@dataclass(frozen=True, slots=True)
class FinishedExchange:
    """One finished attempt of the client path, as observers see it."""

    ctx: CallContext
    """The client's request (payload parsed, rule version resolved)."""
    record: ExchangeRecord
    """The attempt's record, as the recorder gets it."""
    text: str
    """The answer's text (a stream's text joined), "" when there was none."""
    parsed: Mapping[str, Any] | None
    """A non-streamed answer's parsed body (tool calls live there); None for streams."""
    span: SpanContext | None
    """The attempt's trace span, for observers whose own spans link to it."""
    final: bool
    """True for the attempt whose answer the client got; False for one abandoned before a
    fallback (the client never saw it)."""


@dataclass(frozen=True, slots=True)
class RefusedRequest:
    """A client request the gateway answered with its own error before routing it."""

    request_id: str
    """The id it was given (`x-mirrorgate-request-id`, also on the error answer)."""
    endpoint: Endpoint
    """The proxied endpoint it was sent to."""
    error: GatewayError
    """Why it was refused; `error.status` is the HTTP status the client got."""
    duration_s: float
    """From receiving the request to the refusal."""


class ExchangeObserver:
    """Base of everything that listens to the client path. Override the hooks you need; the
    others do nothing. See the module docstring for when each is called."""

    def request_planned(self, ctx: CallContext, plan: RoutePlan) -> None:
        """The request is planned; nothing has been sent upstream yet."""

    def exchange_finished(self, done: FinishedExchange) -> None:
        """One attempt of the client path has its record."""

    def request_closed(self, ctx: CallContext) -> None:
        """The client path of this request is over."""

    def request_refused(self, refusal: RefusedRequest) -> None:
        """The request was refused before it had a route."""
