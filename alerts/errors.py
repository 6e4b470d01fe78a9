"""The errors of `alerts`, in one tree.

    AlertError
    ├── SinkError                 a sink could not deliver one alert
    │   ├── SinkUnavailableError  connection refused/reset, timeout, 5xx, 429: worth retrying
    │   └── SinkRejectedError     any other 4xx: the sink refused this alert; retrying cannot help
    └── PayloadError              an inbound Alertmanager webhook payload is malformed (HTTP 400)

httpx errors are translated into `SinkError`s at the boundary (`alerts.sink.post_json`), so the
dispatcher decides on retries from our types only. `Alert`, `AlertDispatcher` and `build_sink`
raise `ValueError` for arguments no correct caller passes (an unknown kind, a naive time, a
negative retry count): a bug in the caller, not an error of this tree.
"""

from __future__ import annotations


class AlertError(Exception):
    """Base of every error raised by `alerts`."""


class SinkError(AlertError):
    """A sink failed to deliver one alert."""

    def __init__(self, sink: str, message: str, status: int | None = None) -> None:
        super().__init__(f"{sink}: {message}")
        self.sink = sink
        self.status = status
        """The HTTP status the sink answered with, or None when no answer arrived."""


class SinkUnavailableError(SinkError):
    """Transient: the sink was unreachable, timed out, answered 5xx or 429. Retried with backoff."""


class SinkRejectedError(SinkError):
    """Permanent for this alert: the sink answered a 4xx other than 408/429. Not retried."""


class PayloadError(AlertError):
    """A malformed inbound payload; `field` is the offending field's path (`alerts[2].labels`)."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field
        self.message = message
