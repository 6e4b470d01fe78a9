"""The exchange record's own behaviour (its storage is tested with the store)."""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime

from proxy.core import Arm, ExchangeRecord, Status, Usage


def every_field_set() -> ExchangeRecord:
    """A record whose every field differs from its default, so that a copy dropping one shows."""
    return ExchangeRecord(
        "r1", "bot", "prod", "gpt", Arm.CANARY, "messages", "anthropic", True,
        datetime(2026, 12, 3, 14, 0, tzinfo=UTC), 1.25, 0.2, 0.003, Status.UPSTREAM_ERROR, 429,
        usage=Usage(1, 2, 3, 4, 5, True), cost_usd=0.5, error_class="http_429", rule="r",
        rule_version="v2", pair_id="p1", tags=("task:a",), request_body="q", response_body="a",
        response_text="t", operation_id="op", experiment_arm="b", experiment_unit="u",
        sticky_unit="s",
    )  # fmt: skip


def test_every_field_of_the_test_record_is_set() -> None:
    record = every_field_set()
    left_default = []
    for f in dataclasses.fields(ExchangeRecord):
        if f.default is not dataclasses.MISSING:
            default = f.default
        elif f.default_factory is not dataclasses.MISSING:
            default = f.default_factory()
        else:
            continue  # a required field: given
        if getattr(record, f.name) == default:
            left_default.append(f.name)
    assert left_default == []


def test_a_retimed_record_is_the_record_with_its_two_times_replaced() -> None:
    record = every_field_set()
    retimed = record.retimed(2.5, 0.004)
    assert retimed == dataclasses.replace(record, duration_s=2.5, overhead_s=0.004)
    assert (record.duration_s, record.overhead_s) == (1.25, 0.003)  # the original is untouched
    assert hash(retimed) == hash(dataclasses.replace(record, duration_s=2.5, overhead_s=0.004))


def test_a_record_with_other_bodies_is_the_record_with_its_three_bodies_replaced() -> None:
    record = every_field_set()
    rebodied = record.with_bodies("req", None, "text")
    expected = dataclasses.replace(
        record, request_body="req", response_body=None, response_text="text"
    )
    assert rebodied == expected and hash(rebodied) == hash(expected)
    assert record.response_body is not None  # the original is untouched
