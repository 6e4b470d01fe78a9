"""The gateway's log lines: one format for mirrorgate's loggers and uvicorn's, text or JSON.

    text   2026-12-02 05:00:20,123 WARNING mirrorgate.upstream: request 9f…: … key=value …
    json   {"ts": "2026-12-02T05:00:20.123Z", "level": "WARNING", "logger": "mirrorgate.upstream",
            "msg": "…", "request_id": "9f…", …}

Structured fields are what a call passes with `extra=`: the text format appends them to the line
as `key=value`, the JSON format makes each a key of the object. `configure_logging` installs one
handler on the root logger (stderr) and routes uvicorn's server log through it; uvicorn's own
access log stays off (the gateway writes `mirrorgate.access`, `access_fields`).
"""

from __future__ import annotations

import logging
import sys
import time
from collections.abc import Iterable
from typing import IO, Any, Literal

import orjson

from proxy.core import ExchangeRecord

LogFormat = Literal["text", "json"]

TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"
LEVELS = ("debug", "info", "warning", "error", "critical")
"""The levels `--log-level` accepts."""

QUIET_LOGGERS = ("httpx", "httpx2", "httpcore", "openai", "anthropic")
"""Client libraries that log a line per request at INFO: kept to warnings."""

_STANDARD = frozenset(logging.LogRecord("", 0, "", 0, "", None, None).__dict__) | {
    "message",
    "asctime",
    "taskName",
    "color_message",  # uvicorn's message with terminal colours: the plain one is `msg`
}
"""The attributes every log record has: anything else on a record came in through `extra=`."""

MAX_FIELD_CHARS = 500
"""A structured field's text is cut to this many characters (a line stays one bounded line)."""


def fields_of(record: logging.LogRecord) -> dict[str, Any]:
    """The structured fields a log call passed with `extra=`."""
    return {k: v for k, v in record.__dict__.items() if k not in _STANDARD and k[0] != "_"}


def _scalar(value: Any) -> Any:
    if value is None or isinstance(value, bool | int | float):
        return value
    return str(value)[:MAX_FIELD_CHARS]


def _text(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "true" if value else "false"
    text = str(value)
    if not text or any(c.isspace() or c in '"=' for c in text):
        return orjson.dumps(text).decode()
    return text


class TextFormatter(logging.Formatter):
    """`time level logger: message`, then the line's structured fields as `key=value`."""

    def __init__(self) -> None:
        super().__init__(TEXT_FORMAT)

    def format(self, record: logging.LogRecord) -> str:
        line = super().format(record)
        extra = fields_of(record)
        if not extra:
            return line
        parts = []
        for key, value in extra.items():
            parts.append(f"{key}={_text(_scalar(value))}")
        head, sep, tail = line.partition("\n")  # a traceback stays below the fields
        return f"{head} {' '.join(parts)}{sep}{tail}"


class JsonFormatter(logging.Formatter):
    """One JSON object per line: `ts` (RFC 3339, UTC, milliseconds), `level`, `logger`, `msg`,
    the structured fields, and `exc` (the traceback) when there is one."""

    def format(self, record: logging.LogRecord) -> str:
        seconds = int(record.created)
        stamp = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(seconds))
        millis = int((record.created - seconds) * 1000)
        line: dict[str, Any] = {
            "ts": f"{stamp}.{millis:03d}Z",
            "level": record.levelname,
            "logger": record.name,
            "msg": record.getMessage(),
        }
        for key, value in fields_of(record).items():
            if key not in line:
                line[key] = _scalar(value)
        if record.exc_info:
            line["exc"] = self.formatException(record.exc_info)
        elif record.exc_text:
            line["exc"] = record.exc_text
        return orjson.dumps(line).decode()


def formatter(log_format: LogFormat) -> logging.Formatter:
    """The formatter of `server.log_format` / `--log-format`."""
    return JsonFormatter() if log_format == "json" else TextFormatter()


def configure_logging(
    level: str = "info", log_format: LogFormat = "text", stream: IO[str] | None = None
) -> None:
    """One handler on the root logger, writing `log_format` lines to `stream` (stderr); uvicorn's
    server log goes through it too and its access log is silenced. Called again (once the
    config is read), it replaces its handler: there is never a second one. A program that set
    up logging itself (an embedding application, a test runner) keeps its own handlers."""
    root = logging.getLogger()
    ours = [h for h in root.handlers if isinstance(h, _GatewayHandler)]
    if len(ours) == len(root.handlers):
        for old in ours:
            root.removeHandler(old)
        handler = _GatewayHandler(sys.stderr if stream is None else stream)
        handler.setFormatter(formatter(log_format))
        root.addHandler(handler)
    root.setLevel(level.upper())
    for name in QUIET_LOGGERS:
        logging.getLogger(name).setLevel(logging.WARNING)
    _through_root(("uvicorn", "uvicorn.error"))
    logging.getLogger("uvicorn.access").disabled = True


def tag_worker(index: int) -> None:
    """Every line this process writes from now on carries the field `worker` (its number under
    `serve --workers`: `worker=1` in text, `"worker": 1` in JSON), so that the lines of N
    processes interleaved on one stderr can be told apart. For each handler on the root logger."""
    for handler in logging.getLogger().handlers:
        if not any(isinstance(f, _WorkerTag) for f in handler.filters):
            handler.addFilter(_WorkerTag(index))


class _WorkerTag(logging.Filter):
    def __init__(self, index: int) -> None:
        super().__init__()
        self.index = index

    def filter(self, record: logging.LogRecord) -> bool:
        record.worker = self.index
        return True


class _GatewayHandler(logging.StreamHandler):  # type: ignore[type-arg]
    """The handler `configure_logging` installs (so that it knows its own)."""


def _through_root(names: Iterable[str]) -> None:
    for name in names:
        logger = logging.getLogger(name)
        for old in list(logger.handlers):
            logger.removeHandler(old)
        logger.setLevel(logging.NOTSET)  # the root's level: `--log-level` holds for them too
        logger.propagate = True


def access_fields(record: ExchangeRecord) -> dict[str, Any]:
    """The access-log fields of a client request's final record: ids, route, arm, target,
    statuses, times, tokens and cost — never a body, a header or a secret."""
    return {
        "request_id": record.request_id,
        "route": record.route,
        "endpoint": record.endpoint,
        "arm": record.arm.value,
        "target": record.target,
        "status": record.status.value,
        "http_status": record.http_status,
        "duration_ms": round(record.duration_s * 1000, 1),
        "ttft_ms": None if record.ttft_s is None else round(record.ttft_s * 1000, 1),
        "tokens_in": record.usage.input_tokens + record.usage.cached_input_tokens,
        "tokens_out": record.usage.output_tokens,
        "cost_usd": round(record.cost_usd, 6),
        "streamed": record.streamed,
        "error_class": record.error_class,
    }
