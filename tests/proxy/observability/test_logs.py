"""The log formats: text and JSON lines, structured fields, uvicorn routed through one handler,
and the access fields that never carry a body."""

from __future__ import annotations

import contextlib
import io
import json
import logging
import re
from collections.abc import Iterator
from datetime import UTC, datetime

import pytest

from proxy.core import Arm, ExchangeRecord, Status, Usage
from proxy.observability import (
    JsonFormatter,
    LogFormat,
    TextFormatter,
    access_fields,
    configure_logging,
    log_fields,
    tag_worker,
)


def log_record(msg: str = "hello %s", *args: object, **extra: object) -> logging.LogRecord:
    record = logging.LogRecord("mirrorgate.test", logging.WARNING, "f.py", 1, msg, args, None)
    record.__dict__.update(extra)
    return record


def test_a_json_line_has_the_four_keys_and_the_fields_passed_with_extra() -> None:
    line = JsonFormatter().format(log_record("hello %s", "there", request_id="abc", n=3))
    assert "\n" not in line
    data = json.loads(line)
    assert data["level"] == "WARNING" and data["logger"] == "mirrorgate.test"
    assert data["msg"] == "hello there"
    assert data["request_id"] == "abc" and data["n"] == 3
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z", data["ts"])
    stamp = datetime.fromisoformat(data["ts"].replace("Z", "+00:00"))
    assert abs((stamp - datetime.now(UTC)).total_seconds()) < 3600


def test_a_json_line_keeps_a_traceback_on_one_line_and_bounds_a_field() -> None:
    try:
        raise ValueError("boom")
    except ValueError:
        import sys

        record = log_record("failed", reason="x" * 5000)
        record.exc_info = sys.exc_info()
    line = JsonFormatter().format(record)
    assert "\n" not in line
    data = json.loads(line)
    assert "ValueError: boom" in data["exc"] and len(data["reason"]) == 500


def test_a_text_line_keeps_the_shape_and_appends_the_fields() -> None:
    plain = TextFormatter().format(log_record("hello %s", "there"))
    assert re.fullmatch(r"\S+ \S+ WARNING mirrorgate\.test: hello there", plain)
    with_fields = TextFormatter().format(log_record("x", route="bot", ok=True, why="two words"))
    assert with_fields.endswith('mirrorgate.test: x route=bot ok=true why="two words"')


@contextlib.contextmanager
def bare_root() -> Iterator[None]:
    """The root logger without the test runner's handlers, restored afterwards (entered in the
    test itself: pytest adds its capturing handlers after the fixtures)."""
    root = logging.getLogger()
    saved, level = list(root.handlers), root.level
    for handler in saved:
        root.removeHandler(handler)
    yield
    for handler in list(root.handlers):
        root.removeHandler(handler)
    for handler in saved:
        root.addHandler(handler)
    root.setLevel(level)
    logging.getLogger("uvicorn.access").disabled = False
    logging.getLogger("httpx").setLevel(logging.NOTSET)


def test_uvicorn_and_mirrorgate_lines_come_out_of_one_handler_in_one_format() -> None:
    first, out = io.StringIO(), io.StringIO()
    with bare_root():
        configure_logging("info", "text", first)
        configure_logging("info", "json", out)  # once the config is read: replaced, not added
        assert len(logging.getLogger().handlers) == 1
        logging.getLogger("uvicorn.error").info("Started server process [1]")
        logging.getLogger("mirrorgate").info("listening")
        logging.getLogger("uvicorn.access").info("GET / 200")  # ours replaces it
        logging.getLogger("httpx").info("HTTP Request: POST ...")  # a line per request: quiet
    lines = [json.loads(line) for line in out.getvalue().splitlines()]
    assert [(x["logger"], x["msg"]) for x in lines] == [
        ("uvicorn.error", "Started server process [1]"),
        ("mirrorgate", "listening"),
    ]
    assert first.getvalue() == ""


def test_a_program_that_set_up_logging_keeps_its_handlers() -> None:
    own = logging.StreamHandler(io.StringIO())
    with bare_root():
        logging.getLogger().addHandler(own)
        configure_logging("debug", "json", io.StringIO())
        assert logging.getLogger().handlers == [own]
        assert logging.getLogger().level == logging.DEBUG


def test_access_fields_name_the_request_and_never_carry_a_body() -> None:
    record = ExchangeRecord(
        "r1", "bot", "prod", "gpt", Arm.CANARY, "messages", "anthropic", True,
        datetime.now(UTC), 1.25, 0.2, 0.003, Status.OK, 200,
        usage=Usage(input_tokens=10, cached_input_tokens=5, output_tokens=7), cost_usd=0.0123,
        request_body="sk-live-secret", response_body="the answer", response_text="the answer",
    )  # fmt: skip
    fields = access_fields(record)
    assert fields == {
        "request_id": "r1",
        "route": "bot",
        "endpoint": "messages",
        "arm": "canary",
        "target": "prod",
        "status": "ok",
        "http_status": 200,
        "duration_ms": 1250.0,
        "ttft_ms": 200.0,
        "tokens_in": 15,
        "tokens_out": 7,
        "cost_usd": 0.0123,
        "streamed": True,
        "error_class": None,
    }


def test_a_worker_tags_every_line_with_its_number() -> None:
    text, out = io.StringIO(), io.StringIO()
    with bare_root():
        configure_logging("info", "json", out)
        tag_worker(3)
        tag_worker(3)  # once is enough: no second tag
        logging.getLogger("mirrorgate.access").info("done", extra={"route": "bot"})
        logging.getLogger("uvicorn.error").info("Started server process [7]")
        configure_logging("info", "text", text)
        tag_worker(1)
        logging.getLogger("mirrorgate").warning("cut")
    lines = [json.loads(line) for line in out.getvalue().splitlines()]
    assert [(x["msg"], x["worker"]) for x in lines] == [
        ("done", 3),
        ("Started server process [7]", 3),
    ]
    assert text.getvalue().rstrip().endswith("mirrorgate: cut worker=1")


def _without_time(line: str, log_format: str) -> str:
    if log_format == "json":
        data = json.loads(line)
        assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z", data.pop("ts"))
        return json.dumps(data)
    day, clock, rest = line.split(" ", 2)
    assert re.fullmatch(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}", f"{day} {clock}")
    return rest


FIELDS = {
    "request_id": "r1", "route": "bot", "reason": 'two "quoted" words', "n": 3,
    "ms": 1.5, "gone": None, "ok": True, "empty": "", "long": "y" * 900,
}  # fmt: skip


@pytest.mark.parametrize(
    ("log_format", "worker"), [("text", None), ("json", None), ("text", 2), ("json", 4)]
)
def test_a_line_written_directly_is_the_line_logging_writes(
    log_format: LogFormat, worker: int | None, monkeypatch: pytest.MonkeyPatch
) -> None:
    out = io.StringIO()
    access = logging.getLogger("mirrorgate.access")
    with bare_root():
        configure_logging("info", log_format, out)
        if worker is not None:
            tag_worker(worker)
        access.info("%s -> %d", "chat.completions bot", 200, extra=FIELDS)
        with monkeypatch.context() as patched:  # the direct path makes no log record
            patched.setattr(logging.Logger, "makeRecord", _no_record)
            log_fields(access, logging.INFO, "%s -> %d", ("chat.completions bot", 200), FIELDS)
        log_fields(access, logging.DEBUG, "not written", (), FIELDS)  # below the level
    through_logging, direct = out.getvalue().splitlines()
    assert _without_time(direct, log_format) == _without_time(through_logging, log_format)


def _no_record(*args: object, **kwargs: object) -> logging.LogRecord:
    raise AssertionError("a log record was made")


def test_a_line_that_another_handler_hears_goes_through_logging_with_its_fields() -> None:
    out, heard = io.StringIO(), []
    access = logging.getLogger("mirrorgate.access")

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            heard.append(record)

    keep = Keep()
    with bare_root():
        configure_logging("info", "text", out)
        access.addHandler(keep)
        try:
            log_fields(access, logging.INFO, "%s -> %d", ("bot", 200), {"route": "bot"})
        finally:
            access.removeHandler(keep)
    assert [(r.getMessage(), r.__dict__["route"]) for r in heard] == [("bot -> 200", "bot")]
    assert (
        heard[0].funcName
        == "test_a_line_that_another_handler_hears_goes_through_logging_with_its_fields"
    )
    assert out.getvalue().rstrip().endswith("mirrorgate.access: bot -> 200 route=bot")


def test_the_text_time_is_the_logging_module_s_own_across_seconds() -> None:
    ours, theirs = TextFormatter(), logging.Formatter()
    for created in (1767225600.0, 1767225600.9994, 1767225601.0005, 1767225659.5, 1767225600.25):
        record = log_record()
        record.created, record.msecs = created, int((created - int(created)) * 1000) + 0.0
        assert ours.formatTime(record) == theirs.formatTime(record)
