"""Talking to one model: the keep-alive HTTP/1.1 client and its pool, server-sent events, usage
and token counting, and `ModelCaller`, which makes one call and builds its record. Transport
errors become the gateway's error tree (`UpstreamError`, `UpstreamTimeout`) in `errors.py` and
nowhere else; none of them is exported. Imports `proxy.core` and `proxy.config`.
"""

from .caller import (
    TOTAL_TIMEOUT_FACTOR,
    Attempt,
    CallContext,
    ModelCaller,
    failure_outcome,
    stream_outcome,
)
from .client import HOP_BY_HOP, UpstreamClient, shared_ssl_context
from .http11 import UpstreamResponse
from .streaming import StreamObserver
from .tokens import load_encoding

__all__ = [
    "HOP_BY_HOP",
    "TOTAL_TIMEOUT_FACTOR",
    "Attempt",
    "CallContext",
    "ModelCaller",
    "StreamObserver",
    "UpstreamClient",
    "UpstreamResponse",
    "failure_outcome",
    "load_encoding",
    "shared_ssl_context",
    "stream_outcome",
]
