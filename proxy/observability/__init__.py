"""The metric catalogue (every `mirrorgate_*` family, on a registry passed in) and OpenTelemetry
tracing with the GenAI conventions. Imports `proxy.core` and `proxy.config`.
"""

from .metrics import GatewayMetrics
from .tracing import ExchangeTracer, build_tracer_provider

__all__ = [
    "ExchangeTracer",
    "GatewayMetrics",
    "build_tracer_provider",
]
