"""Talking to one model: the keep-alive HTTP/1.1 client and its pool, server-sent events, usage
and token counting, and `ModelCaller`, which makes one call and builds its record. Transport
errors become the gateway's error tree here and nowhere else. Imports `proxy.core` and
`proxy.config`.
"""

from .caller import Attempt, CallContext, ModelCaller, stream_outcome
from .client import HOP_BY_HOP, UpstreamClient, shared_ssl_context
from .http11 import UpstreamHTTPError, UpstreamResponse, UpstreamTimeout
from .streaming import StreamObserver

__all__ = [
    "HOP_BY_HOP",
    "Attempt",
    "CallContext",
    "ModelCaller",
    "StreamObserver",
    "UpstreamClient",
    "UpstreamHTTPError",
    "UpstreamResponse",
    "UpstreamTimeout",
    "shared_ssl_context",
    "stream_outcome",
]
