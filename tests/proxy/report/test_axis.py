"""The report charts' axes: round ticks, values mapped onto pixels, linear or log10."""

from __future__ import annotations

import pytest

from proxy.report.axis import Axis, TimeAxis, nice_step


@pytest.mark.parametrize(
    ("span", "step"), [(10, 2), (7, 2), (1, 0.2), (0.3, 0.1), (120, 25), (900, 200)]
)
def test_steps_are_one_two_two_and_a_half_or_five_times_a_power_of_ten(
    span: float, step: float
) -> None:
    assert nice_step(span) == pytest.approx(step)


def test_a_linear_axis_starts_at_zero_and_ends_on_a_tick() -> None:
    axis = Axis(3.2, 47.0, start=0, end=100, log=False)
    assert axis.low == 0 and axis.high == 50
    assert axis.ticks == [0, 10, 20, 30, 40, 50]
    assert axis(0) == 0 and axis(50) == 100 and axis(25) == pytest.approx(50)


def test_negative_values_and_a_flat_series_still_get_an_axis() -> None:
    below = Axis(-4.0, 6.0, start=0, end=10, log=False)
    assert below.low <= -4 and below.high >= 6 and 0 in below.ticks
    flat = Axis(5.0, 5.0, start=0, end=10, log=False)
    assert flat.high > flat.low and flat(5.0) < 10


def test_a_log_axis_ticks_one_two_five_per_decade_and_maps_decades_evenly() -> None:
    axis = Axis(0.012, 0.9, start=200, end=0, log=True)  # y grows upwards: pixels run backwards
    assert axis.low == pytest.approx(0.01) and axis.high == pytest.approx(1.0)
    assert axis.ticks == pytest.approx([0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0])
    assert axis(0.01) == pytest.approx(200) and axis(1.0) == pytest.approx(0)
    assert axis(0.1) == pytest.approx(100)  # one decade of two: half way
    assert axis(0.0001) == pytest.approx(200)  # below the axis: clamped to its end


def test_a_log_axis_over_many_decades_keeps_only_the_powers_of_ten() -> None:
    axis = Axis(0.001, 50.0, start=0, end=100, log=True)
    assert axis.high == 50
    assert axis.ticks == pytest.approx([0.001, 0.01, 0.1, 1.0, 10.0])


@pytest.mark.parametrize(
    ("span_s", "ticks"),
    [
        (1200, [0, 300, 600, 900, 1200, 1500]),  # 20 min: every 5 min, room after the last event
        (45, [0, 10, 20, 30, 40, 50]),
        (3 * 3600, [0, 3600, 7200, 10800, 14400]),
        (0, [0, 1, 2]),  # a single moment still has a width
    ],
)
def test_a_time_axis_ticks_at_round_times_past_the_span(span_s: float, ticks: list[int]) -> None:
    axis = TimeAxis(span_s, 100, 500)
    assert axis.ticks == ticks
    assert axis(0) == 100 and axis(axis.high) == 500
    assert axis.high > span_s
