"""Inter-reviewer agreement (Cohen's kappa, score differences) and position bias."""

from __future__ import annotations

import pytest

from analyzers.review_agreement import ScoredPair, agreement, position_bias


def _r(item: str, a: int, b: int, pref: str) -> ScoredPair:
    return ScoredPair(item, a, b, pref)  # type: ignore[arg-type]


def test_perfect_agreement_is_kappa_one() -> None:
    reviews = [_r("1", 5, 2, "A"), _r("2", 1, 4, "B"), _r("1", 5, 2, "A"), _r("2", 1, 4, "B")]
    result = agreement(reviews)
    assert result.items == 2
    assert result.kappa == pytest.approx(1.0)
    assert result.mean_score_difference == 0.0


def test_kappa_by_hand() -> None:
    # Four items; reviewers agree on three. Reviewer one: A A B tie; reviewer two: A A B B.
    one = [_r("1", 4, 2, "A"), _r("2", 4, 2, "A"), _r("3", 2, 4, "B"), _r("4", 3, 3, "tie")]
    two = [_r("1", 5, 2, "A"), _r("2", 4, 1, "A"), _r("3", 2, 4, "B"), _r("4", 3, 4, "B")]
    result = agreement(one + two)
    # observed 3/4; chance: A 2/4*2/4 + B 1/4*2/4 + tie 1/4*0 = 0.375
    assert result.observed == pytest.approx(0.75)
    assert result.kappa == pytest.approx((0.75 - 0.375) / (1 - 0.375))
    # score differences: a: 1,0,0,0 b: 0,1,0,1 -> 3/8
    assert result.mean_score_difference == pytest.approx(3 / 8)


def test_a_third_review_is_not_compared_and_single_reviews_give_nothing() -> None:
    assert agreement([_r("1", 3, 3, "tie")]).kappa is None
    result = agreement([_r("1", 5, 1, "A"), _r("1", 5, 1, "A"), _r("1", 1, 5, "B")])
    assert result.items == 1 and result.observed == 1.0


def test_kappa_undefined_when_everyone_always_says_the_same() -> None:
    result = agreement([_r("1", 3, 3, "tie"), _r("1", 3, 3, "tie")])
    assert result.items == 1 and result.kappa is None and result.observed == 1.0


def test_position_bias_counts_sides() -> None:
    bias = position_bias(["A", "A", "A", "B", "tie"])
    assert (bias.reviews, bias.a, bias.b, bias.ties) == (5, 3, 1, 1)
    assert bias.a_share == pytest.approx(0.75)
    assert position_bias(["tie"]).a_share is None
