"""The GIL switch interval `serve` sets: 1 ms unless the environment says another valid value."""

from __future__ import annotations

import logging
import sys
from collections.abc import Iterator

import pytest

from proxy.app.switching import DEFAULT_MS, VARIABLE, set_switch_interval, switch_interval_ms


@pytest.fixture
def interval() -> Iterator[None]:
    before = sys.getswitchinterval()
    yield
    sys.setswitchinterval(before)


def test_serve_sets_one_millisecond_by_default(interval: None) -> None:
    assert DEFAULT_MS == 1.0
    assert set_switch_interval({}) == 1.0
    assert sys.getswitchinterval() == pytest.approx(0.001)


def test_the_environment_sets_another_interval(interval: None) -> None:
    assert set_switch_interval({VARIABLE: " 0.5 "}) == 0.5
    assert sys.getswitchinterval() == pytest.approx(0.0005)
    assert switch_interval_ms({VARIABLE: "5"}) == 5.0
    assert switch_interval_ms({VARIABLE: ""}) == DEFAULT_MS


@pytest.mark.parametrize(
    "raw", ["0", "0.01", "101", "-1", "nan", "inf", "1ms", "x" * 10_000, "1e309"]
)
def test_a_value_out_of_range_or_not_a_number_keeps_the_default_and_says_so(
    raw: str, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING, logger="mirrorgate.serve"):
        assert switch_interval_ms({VARIABLE: raw}) == DEFAULT_MS
    [record] = caplog.records
    assert VARIABLE in record.getMessage()
    assert len(record.getMessage()) < 200  # a hostile value is cut, not echoed whole
