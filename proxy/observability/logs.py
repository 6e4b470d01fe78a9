"""The gateway's log lines: one format for mirrorgate's loggers and uvicorn's, text or JSON.

    text   2026-12-02 05:00:20,123 WARNING mirrorgate.upstream: request 9f…: … key=value …
    json   {"ts": "2026-12-02T05:00:20.123Z", "level": "WARNING", "logger": "mirrorgate.upstream",
            "msg": "…", "request_id": "9f…", …}

Structured fields are what a call passes with `extra=`: the text format appends them to the line
as `key=value`, the JSON format makes each a key of the object. `configure_logging` installs one
handler on the root logger (stderr) and routes uvicorn's server log through it; uvicorn's own
access log stays off (the gateway writes `mirrorgate.access`, `access_fields`). `log_fields`
writes a line of the client path (the access log's) without the logging module's per-record
machinery when that handler is the only one to hear it: the same line, at a fraction of the cost.
"""

from __future__ import annotations

import logging
import re
import sys
import time
from collections.abc import Callable, Iterable
from typing import IO, Any, Literal, cast

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


_QUOTED = re.compile(r'[\s"=]')
"""A text field's value is quoted when it holds one of these (`\\s` is `str.isspace`'s set)."""


def _text(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "true" if value else "false"
    text = str(value)
    if not text or _QUOTED.search(text) is not None:
        return orjson.dumps(text).decode()
    return text


def _shown(value: Any) -> str:
    """`_text(_scalar(value))`, with the usual kinds of value first (a line has a dozen)."""
    kind = type(value)
    if kind is str:
        text: str = value[:MAX_FIELD_CHARS]
        return text if text and _QUOTED.search(text) is None else orjson.dumps(text).decode()
    if kind is int or kind is float:  # neither holds a space, a quote or `=`
        return str(value)
    if value is None:
        return "-"
    if kind is bool:
        return "true" if value else "false"
    return _text(_scalar(value))


def _with_fields(line: str, fields: dict[str, Any]) -> str:
    if not fields:
        return line
    parts = " ".join([f"{key}={_shown(value)}" for key, value in fields.items()])
    head, sep, tail = line.partition("\n")  # a traceback stays below the fields
    return f"{head} {parts}{sep}{tail}"


def _msecs(created: float) -> float:
    """A record's `msecs`, as `logging.LogRecord` computes it from `created`."""
    return int((created - int(created)) * 1000) + 0.0


class _SecondStamps:
    """The text of a time to the second, made once a second (a line or two a millisecond share
    it) by `render`."""

    __slots__ = ("_last", "_render")

    def __init__(self, render: Callable[[int], str]) -> None:
        self._render = render
        self._last: tuple[int, str] = (-1, "")

    def text(self, created: float) -> str:
        seconds = int(created)
        second, text = self._last
        if second != seconds:
            text = self._render(seconds)
            self._last = (seconds, text)  # one assignment: safe from any thread
        return text


class TextFormatter(logging.Formatter):
    """`time level logger: message`, then the line's structured fields as `key=value`."""

    def __init__(self) -> None:
        super().__init__(TEXT_FORMAT)
        self._seconds = _SecondStamps(
            lambda seconds: time.strftime(self.default_time_format, self.converter(seconds))
        )

    def formatTime(self, record: logging.LogRecord, datefmt: str | None = None) -> str:
        if datefmt is not None:
            return super().formatTime(record, datefmt)
        return self._stamp(record.created, record.msecs)

    def _stamp(self, created: float, msecs: float) -> str:
        text = self._seconds.text(created)
        msec_format = self.default_msec_format
        return text if msec_format is None else msec_format % (text, msecs)

    def format(self, record: logging.LogRecord) -> str:
        return _with_fields(super().format(record), fields_of(record))

    def line(
        self, name: str, level: str, created: float, message: str, fields: dict[str, Any]
    ) -> str:
        """The line `format` makes of a record with these parts and no traceback."""
        stamp = self._stamp(created, _msecs(created))
        return _with_fields(f"{stamp} {level} {name}: {message}", fields)


class JsonFormatter(logging.Formatter):
    """One JSON object per line: `ts` (RFC 3339, UTC, milliseconds), `level`, `logger`, `msg`,
    the structured fields, and `exc` (the traceback) when there is one."""

    def __init__(self) -> None:
        super().__init__()
        self._seconds = _SecondStamps(
            lambda seconds: time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(seconds))
        )

    def _object(
        self, name: str, level: str, created: float, message: str, fields: dict[str, Any]
    ) -> dict[str, Any]:
        stamp = self._seconds.text(created)
        millis = int((created - int(created)) * 1000)
        line: dict[str, Any] = {
            "ts": f"{stamp}.{millis:03d}Z",
            "level": level,
            "logger": name,
            "msg": message,
        }
        for key, value in fields.items():
            if key not in line:
                line[key] = _scalar(value)
        return line

    def format(self, record: logging.LogRecord) -> str:
        line = self._object(
            record.name, record.levelname, record.created, record.getMessage(), fields_of(record)
        )
        if record.exc_info:
            line["exc"] = self.formatException(record.exc_info)
        elif record.exc_text:
            line["exc"] = record.exc_text
        return orjson.dumps(line).decode()

    def line(
        self, name: str, level: str, created: float, message: str, fields: dict[str, Any]
    ) -> str:
        """The line `format` makes of a record with these parts and no traceback."""
        return orjson.dumps(self._object(name, level, created, message, fields)).decode()


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


def log_fields(
    logger: logging.Logger, level: int, msg: str, args: tuple[Any, ...], fields: dict[str, Any]
) -> None:
    """`logger.log(level, msg, *args, extra=fields)`: the same line, in the same place.

    When the gateway's own handler (`configure_logging`) is the only one that would hear the
    line, the line is formatted straight from its parts and written under the handler's lock:
    no `LogRecord`, no caller lookup, no filter chain (the worker tag is added as its filter
    would). That is most of a line's cost, and the client path writes one per request. Any other
    setup — a program's or a test's own handlers, a filter, a record factory, another formatter —
    goes through `logging` as usual.
    """
    if not logger.isEnabledFor(level):
        return
    handler = _sole_handler(logger, level)
    if handler is None:
        logger.log(level, msg, *args, extra=fields, stacklevel=2)
        return
    formatter = handler.formatter
    assert isinstance(formatter, TextFormatter | JsonFormatter)  # checked by _sole_handler
    if handler.filters:  # the last tag's number, as the filters would leave it
        fields = {**fields, "worker": cast(_WorkerTag, handler.filters[-1]).index}
    message = msg % args if args else msg
    line = formatter.line(logger.name, logging.getLevelName(level), time.time(), message, fields)
    handler.acquire()
    try:
        handler.stream.write(line + handler.terminator)
        handler.flush()
    except RecursionError:  # as StreamHandler.emit does
        raise
    except Exception:
        handler.handleError(logger.makeRecord(logger.name, level, "", 0, msg, args, None))
    finally:
        handler.release()


def _sole_handler(logger: logging.Logger, level: int) -> _GatewayHandler | None:
    """The gateway's handler, when it is the only handler `logger`'s lines reach at `level`
    (the walk of `Logger.callHandlers`), with its own formatter and no filter but the worker
    tag; None otherwise."""
    if logger.filters or logging.getLogRecordFactory() is not logging.LogRecord:
        return None
    found: _GatewayHandler | None = None
    current: logging.Logger | None = logger
    while current is not None:
        for handler in current.handlers:
            if found is not None or type(handler) is not _GatewayHandler:
                return None
            found = handler
        current = current.parent if current.propagate else None
    if found is None or level < found.level:
        return None
    if type(found.formatter) not in (TextFormatter, JsonFormatter):
        return None
    if any(type(f) is not _WorkerTag for f in found.filters):
        return None
    return found
