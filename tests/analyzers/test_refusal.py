"""Refusals told from answers by phrases near the start, compared in a folded form."""

from __future__ import annotations

from analyzers.refusal import DEFAULT_REFUSAL_PHRASES, find_refusal, fold


def test_folding_lowers_collapses_space_and_straightens_apostrophes() -> None:
    assert fold("  I   CAN'T\n help ") == "i can't help"
    assert fold("I can\u2019t help") == "i can't help"
    full_width = "".join(chr(ord(c) + 0xFEE0) for c in "IMPOSSIBLE")
    assert fold(full_width) == "impossible"  # NFKC: full-width letters
    assert all(fold(phrase) == phrase for phrase in DEFAULT_REFUSAL_PHRASES)


def test_a_refusal_phrase_is_found_in_any_spelling() -> None:
    assert find_refusal("I\u2019m sorry, but I CAN\u2019T do that.") == "i'm sorry, but i can't"
    assert find_refusal("Sure! The limit is 150 kg.") is None


def test_only_the_start_of_the_answer_counts() -> None:
    helpful = "Here is the whole procedure. " * 50 + "I cannot help with customs forms."
    assert len(helpful) > 1_000
    assert find_refusal(helpful) is None
    assert find_refusal(helpful, window=len(helpful)) == "i cannot help with"


def test_configured_phrases_replace_the_defaults() -> None:
    phrases = (fold("Not in my remit"),)
    assert find_refusal("That is NOT in my  remit, sorry.", phrases) == "not in my remit"
    assert find_refusal("I cannot help with that.", phrases) is None
