"""The offline gate's decision: no run, too old, no baseline, a regression on a counted
stratum, a drop within the margin, a small stratum that never blocks."""

from __future__ import annotations

from analyzers.evalgate import StratumResult, decide

PRIMARY = {"all": StratumResult(100, 90), "difficulty=hard": StratumResult(30, 27),
           "task=rare": StratumResult(5, 5)}  # fmt: skip


def verdict(candidate: dict[str, StratumResult] | None, **kwargs: object) -> object:
    options: dict[str, object] = {
        "age_s": 3600.0, "max_age_s": 7 * 86400.0, "max_drop": 0.02, "min_cases": 20,
        "candidate_name": "cand", "set_name": "support",
    }  # fmt: skip
    options.update(kwargs)
    primary = options.pop("primary", PRIMARY)
    return decide(candidate, primary, **options)  # type: ignore[arg-type]


def test_no_run_is_refused() -> None:
    result = verdict(None, age_s=None)
    assert not result.allowed and "no evaluation run of cand on set support" in result.reason


def test_an_old_run_is_refused_with_its_age() -> None:
    result = verdict(PRIMARY, age_s=8 * 86400.0)
    assert not result.allowed and "8.0d old; require_eval.max_age is 7.0d" in result.reason


def test_a_run_without_the_primary_beside_it_is_refused() -> None:
    result = verdict(PRIMARY, primary=None)
    assert not result.allowed and "no run of the primary" in result.reason


def test_a_regression_on_a_counted_stratum_is_refused_with_the_numbers() -> None:
    candidate = {"all": StratumResult(100, 89), "difficulty=hard": StratumResult(30, 20),
                 "task=rare": StratumResult(5, 5)}  # fmt: skip
    result = verdict(candidate)
    assert not result.allowed
    assert "difficulty=hard: 20/30 66.7% vs primary 27/30 90.0% (-23.3 points)" in result.reason
    assert "all:" not in result.reason  # one point is within the margin


def test_a_drop_within_the_margin_and_a_small_stratum_pass() -> None:
    candidate = {"all": StratumResult(100, 88), "difficulty=hard": StratumResult(30, 27),
                 "task=rare": StratumResult(5, 0)}  # fmt: skip
    result = verdict(candidate)
    assert result.allowed, result.reason
    rare = next(c for c in result.strata if c.stratum == "task=rare")
    assert rare.drop == 1.0 and not rare.counted and not rare.blocking
    # Exactly at the margin passes; just beyond it does not.
    assert verdict({"all": StratumResult(100, 88)}, primary={"all": StratumResult(100, 90)}).allowed
    assert not verdict(
        {"all": StratumResult(1000, 879)}, primary={"all": StratumResult(1000, 900)}
    ).allowed
