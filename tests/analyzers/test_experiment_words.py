"""How decisions write their numbers: signs, points, percentages, counts, durations."""

from __future__ import annotations

import pytest

from analyzers.experiment_words import count, duration, points, relative, signed

MINUS = "\N{MINUS SIGN}"


def test_signs_are_always_shown_and_minus_is_typographic() -> None:
    assert signed(1.26, 1) == "+1.3"
    assert signed(-0.4, 1) == f"{MINUS}0.4"
    assert signed(-0.01, 1) == "+0.0"  # rounds to zero: never a negative zero
    assert signed(0.0, 0) == "+0"


def test_points_and_relative_changes_read_like_the_issue() -> None:
    assert points(-0.004, -0.021, 0.013) == f"{MINUS}0.4 pts [{MINUS}2.1, +1.3]"
    assert relative(-0.41, -0.44, -0.38) == f"{MINUS}41 % [{MINUS}44, {MINUS}38]"
    assert relative(-0.041, -0.063, -0.02) == f"{MINUS}4.1 % [{MINUS}6.3, {MINUS}2.0]"
    assert points(0.05, None, None) == "+5.0 pts"
    assert relative(0.2, None, None) == "+20 %"


@pytest.mark.parametrize(
    ("value", "shown"), [(7, "7"), (99, "99"), (1234, "1,200"), (987, "990"), (15_500, "16,000")]
)
def test_counts_keep_two_significant_figures(value: int, shown: str) -> None:
    assert count(value) == shown


@pytest.mark.parametrize(
    ("seconds", "shown"),
    [
        (0.2, "1 s"),
        (40, "40 s"),
        (25 * 60, "25 min"),
        (3 * 3600 + 20 * 60, "3 h 20 min"),
        (2 * 3600 + 58 * 60, "3 h"),
        (5 * 3600, "5 h"),
        (4 * 86400, "4 days"),
    ],
)
def test_durations_read_in_the_best_unit(seconds: float, shown: str) -> None:
    assert duration(seconds) == shown
