"""The metric catalogue (every `mirrorgate_*` family, on a registry passed in) and OpenTelemetry
tracing with the GenAI conventions. Imports only `proxy.core` and `proxy.config`: it sits
below the store and the upstream client so that both can count into the one catalogue.
"""

from . import gcpause
from .logs import (
    LEVELS,
    JsonFormatter,
    LogFormat,
    TextFormatter,
    access_fields,
    configure_logging,
    log_fields,
    tag_worker,
)
from .merging import merge_worker_expositions
from .metrics import (
    AlertDeliveryMetrics,
    ConnectionMetrics,
    GatewayMetrics,
    JournalMetrics,
    RecorderMetrics,
    WorkerMetrics,
)
from .tracing import ExchangeTracer, build_tracer_provider

__all__ = [
    "LEVELS",
    "AlertDeliveryMetrics",
    "ConnectionMetrics",
    "ExchangeTracer",
    "GatewayMetrics",
    "JournalMetrics",
    "JsonFormatter",
    "LogFormat",
    "RecorderMetrics",
    "TextFormatter",
    "WorkerMetrics",
    "access_fields",
    "build_tracer_provider",
    "configure_logging",
    "gcpause",
    "log_fields",
    "merge_worker_expositions",
    "tag_worker",
]
