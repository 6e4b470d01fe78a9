"""Deterministic sampling: one key, one answer, and each rate takes its share of keys."""

from __future__ import annotations

import pytest

from proxy.core.sampling import sampled


def test_a_key_always_lands_on_the_same_side() -> None:
    first = [sampled(f"user-{i}", "cand-a", 0.5) for i in range(200)]
    assert first == [sampled(f"user-{i}", "cand-a", 0.5) for i in range(200)]


@pytest.mark.parametrize("rate", [0.05, 0.3, 0.5, 0.9])
def test_each_rate_takes_its_share_of_keys(rate: float) -> None:
    keys = [f"request-{i}" for i in range(20_000)]
    share = sum(sampled(key, "cand-a", rate) for key in keys) / len(keys)
    assert share == pytest.approx(rate, abs=0.015)


def test_the_rate_bounds_are_all_or_nothing() -> None:
    keys = [f"k{i}" for i in range(500)]
    assert all(sampled(key, "s", 1.0) for key in keys)
    assert all(sampled(key, "s", 1.5) for key in keys)
    assert not any(sampled(key, "s", 0.0) for key in keys)
    assert not any(sampled(key, "s", -1.0) for key in keys)


def test_a_lower_rate_takes_a_subset_of_a_higher_one() -> None:
    # Raising a canary from 10 % to 30 % keeps every user who was on it.
    keys = [f"user-{i}" for i in range(5_000)]
    low = {k for k in keys if sampled(k, "salt", 0.1)}
    high = {k for k in keys if sampled(k, "salt", 0.3)}
    assert low and low < high


def test_candidates_sample_independently() -> None:
    # Each candidate (salt) draws its own users: two 50 % shadows do not pick the same half.
    keys = [f"user-{i}" for i in range(10_000)]
    a = {k for k in keys if sampled(k, "cand-a", 0.5)}
    b = {k for k in keys if sampled(k, "cand-b", 0.5)}
    assert len(a & b) / len(keys) == pytest.approx(0.25, abs=0.02)
