"""The guard's pure verdict: a stubborn primary regresses, a follower does not, a rule harder
for everyone does not, too little data holds, and an A/A run never switches."""

from __future__ import annotations

import random

import pytest

from analyzers.rule_guard import GuardEvidence, GuardOutcome, choose_candidate, guard_verdict


def test_a_stubborn_primary_regresses_and_may_be_switched() -> None:
    verdict = guard_verdict(GuardEvidence((58, 60), (1, 60), (2, 60)), min_samples=30)
    assert verdict.outcome is GuardOutcome.REGRESSED and verdict.switchable
    assert verdict.against_others is not None and verdict.against_others.beyond
    assert verdict.against_previous.beyond
    assert "58/60 failing" in verdict.reason


def test_a_follower_primary_does_not_regress() -> None:
    verdict = guard_verdict(GuardEvidence((2, 200), (1, 200), (3, 200)), min_samples=30)
    assert verdict.outcome is GuardOutcome.CLEAR and not verdict.switchable


def test_a_rule_harder_for_every_model_is_not_the_primarys_regression() -> None:
    # Everyone fails the new version about as often: the primary is worse than itself before,
    # not worse than the others.
    verdict = guard_verdict(GuardEvidence((160, 400), (8, 400), (152, 400)), min_samples=30)
    assert verdict.outcome is GuardOutcome.CLEAR
    assert verdict.against_previous.beyond
    assert verdict.against_others is not None and not verdict.against_others.beyond


def test_a_primary_as_bad_before_did_not_regress_on_this_rule() -> None:
    verdict = guard_verdict(GuardEvidence((50, 100), (50, 100), (1, 100)), min_samples=30)
    assert verdict.outcome is GuardOutcome.CLEAR


@pytest.mark.parametrize(
    "evidence",
    [
        GuardEvidence((29, 29), (0, 60), (0, 60)),  # the primary's new answers
        GuardEvidence((60, 60), (0, 29), (0, 60)),  # its previous version
        GuardEvidence((60, 60), (0, 60), (0, 29)),  # the others
        GuardEvidence((60, 60), (0, 60), (0, 0)),  # others expected, none yet
    ],
)
def test_too_little_data_holds(evidence: GuardEvidence) -> None:
    verdict = guard_verdict(evidence, min_samples=30)
    assert verdict.outcome is GuardOutcome.HOLD and "too little evidence" in verdict.reason


def test_without_other_models_the_guard_can_only_alert() -> None:
    evidence = GuardEvidence((60, 60), (0, 60), (0, 0), others_expected=False)
    verdict = guard_verdict(evidence, min_samples=30)
    assert verdict.outcome is GuardOutcome.REGRESSED and not verdict.switchable
    assert verdict.against_others is None


def test_an_aa_run_never_switches() -> None:
    """Every model has the same failure rate; the guard looks after every 10 answers of the
    primary, for 200 runs: no regression, no switch."""
    rng = random.Random(13)
    regressions = switches = 0
    for _ in range(200):
        p = rng.choice((0.02, 0.1, 0.3))
        counts = {"new": [0, 0], "prev": [0, 0], "others": [0, 0], "cand": [0, 0]}
        for _look in range(30):
            for key, n in (("new", 10), ("prev", 10), ("others", 10), ("cand", 10)):
                counts[key][1] += n
                counts[key][0] += sum(rng.random() < p for _ in range(n))
            verdict = guard_verdict(
                GuardEvidence(tuple(counts["new"]), tuple(counts["prev"]), tuple(counts["others"])),  # type: ignore[arg-type]
                min_samples=30,
            )
            if verdict.outcome is GuardOutcome.REGRESSED:
                regressions += 1
                failing, answers = counts["cand"]
                chosen, _, _ = choose_candidate(
                    tuple(counts["new"]),  # type: ignore[arg-type]
                    {"twin": (answers - failing, answers)},
                    min_samples=30,
                )
                switches += chosen is not None
                break
    assert switches == 0 and regressions <= 2


def test_the_candidate_with_the_best_lower_bound_is_chosen() -> None:
    chosen, scores, why = choose_candidate(
        (58, 60), {"a": (55, 60), "b": (290, 300), "few": (10, 10)}, min_samples=30
    )
    assert chosen == "b" and "290/300 compliant" in why
    assert {s.name: s.low is None for s in scores} == {"a": False, "b": False, "few": True}


def test_a_candidate_not_clearly_better_than_the_primary_is_never_chosen() -> None:
    chosen, scores, why = choose_candidate((20, 60), {"meh": (40, 60)}, min_samples=30)
    assert chosen is None and not scores[0].better
    assert "meh is not clearly better than the primary" in why


def test_no_candidates_means_no_switch() -> None:
    chosen, scores, why = choose_candidate((60, 60), {}, min_samples=30)
    assert (chosen, scores) == (None, []) and "no candidates" in why
