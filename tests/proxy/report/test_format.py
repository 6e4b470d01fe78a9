"""Numbers as the reports print them: durations, money, percentages, rates and intervals."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

import pytest

from analyzers.summary import Difference, Rate
from proxy.report.format import (
    DASH,
    as_sentence,
    format_difference,
    format_duration,
    format_percent,
    format_rate,
    format_ratio,
    format_time,
    format_usd,
)


@pytest.mark.parametrize(
    ("seconds", "signed", "text"),
    [
        (0.0004, False, "0.4 ms"), (0.245, False, "245 ms"), (1.3249, False, "1.32 s"),
        (0.012, True, "+12 ms"), (-0.5, True, "-500 ms"), (0.0, True, "0.0 ms"),
        (None, False, DASH),
    ],
)  # fmt: skip
def test_durations(seconds: float | None, signed: bool, text: str) -> None:
    assert format_duration(seconds, signed=signed) == text


@pytest.mark.parametrize(
    ("amount", "signed", "text"),
    [
        (1234.4, False, "$1,234"), (12.345, False, "$12.35"), (0.00123456, False, "$0.00123"),
        (0.5, False, "$0.500"), (0.0, False, "$0"), (0.02, True, "+$0.0200"),
        (-3.0, True, "-$3.00"), (None, False, DASH),
    ],
)  # fmt: skip
def test_money_keeps_three_significant_digits_below_a_dollar(
    amount: float | None, signed: bool, text: str
) -> None:
    assert format_usd(amount, signed=signed) == text


def test_shares_rates_and_differences() -> None:
    assert format_percent(0.1234) == "12.3%" and format_percent(None) == DASH
    assert format_ratio(1.2) == "1.20x" and format_ratio(None) == DASH
    assert format_rate(Rate(8, 10, 0.8, 0.49, 0.943)) == "80.0% [49.0, 94.3]"
    assert format_rate(Rate(0, 0, None, 0.0, 1.0)) == DASH
    assert format_difference(Difference(0.12, 0.031, 0.205)) == "+12.0 pp [+3.1, +20.5]"
    assert format_difference(None) == DASH


def test_times_print_in_utc_and_phrases_become_sentences() -> None:
    paris = datetime(2026, 3, 1, 13, 0, 5, tzinfo=timezone(timedelta(hours=1)))
    assert format_time(paris) == "2026-03-01 12:00:05 UTC"
    assert format_time(datetime(2026, 3, 1, tzinfo=UTC)) == "2026-03-01 00:00:00 UTC"
    assert format_time(None) == DASH
    assert as_sentence("rule change at 12:00") == "Rule change at 12:00."
