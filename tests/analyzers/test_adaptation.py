"""The context-awareness score: rates and Wilson intervals from a tally of scored probes."""

from __future__ import annotations

import pytest

from analyzers.adaptation import adaptation_score


def test_no_probes_knows_nothing() -> None:
    score = adaptation_score(0, 0, 0)
    assert score.probes == 0
    assert (score.adaptation.rate, score.adaptation.low, score.adaptation.high) == (None,) * 3
    assert (score.stuck_rate.rate, score.stuck_rate.low, score.stuck_rate.high) == (None,) * 3


def test_none_followed_of_ten_keeps_a_spread() -> None:
    score = adaptation_score(0, 10, 0)
    assert score.adaptation.rate == 0.0
    assert score.adaptation.low == pytest.approx(0.0, abs=1e-12)
    # Wilson 95% upper bound of 0/10 is z²/(n + z²) = 3.8415/13.8415
    assert score.adaptation.high == pytest.approx(0.27753, abs=1e-4)
    assert score.stuck_rate.rate == 1.0
    assert score.stuck_rate.low == pytest.approx(1 - 0.27753, abs=1e-4)
    assert score.stuck_rate.high == pytest.approx(1.0)


def test_all_followed_of_ten() -> None:
    score = adaptation_score(10, 0, 0)
    assert score.adaptation.rate == 1.0
    assert score.adaptation.low == pytest.approx(0.72247, abs=1e-4)
    assert score.stuck_rate.rate == 0.0
    assert score.stuck_rate.high == pytest.approx(0.27753, abs=1e-4)


def test_sixty_of_two_hundred() -> None:
    score = adaptation_score(60, 130, 10)
    assert score.probes == 200
    assert score.adaptation.rate == pytest.approx(0.3)
    # Wilson 95% for 60/200: centre (60 + 1.92)/203.84, half-width 1.96·√(0.21/200 + z²/4n²)·...
    assert score.adaptation.low == pytest.approx(0.2411, abs=1e-3)
    assert score.adaptation.high == pytest.approx(0.3664, abs=1e-3)
    assert score.stuck_rate.rate == pytest.approx(0.65)
    assert score.stuck_rate.low < 0.65 < score.stuck_rate.high


def test_as_dict_is_the_admin_shape() -> None:
    shape = adaptation_score(3, 1, 0).as_dict()
    assert shape["followed"] == 3 and shape["stuck"] == 1 and shape["other"] == 0
    assert shape["probes"] == 4
    assert shape["adaptation"]["rate"] == 0.75  # type: ignore[index]
    assert shape["stuck_rate"]["rate"] == 0.25  # type: ignore[index]
    assert set(shape["stuck_rate"]) == {"rate", "low", "high"}  # type: ignore[arg-type]


def test_negative_counts_are_refused() -> None:
    with pytest.raises(ValueError, match="negative"):
        adaptation_score(-1, 0, 0)
