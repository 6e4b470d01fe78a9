"""Our own token counts (for upstreams that report no usage): cl100k, offline, never refusing."""

from __future__ import annotations

from proxy.upstream.tokens import (
    EXACT_CHARS,
    count_tokens,
    estimate_tokens,
    estimate_usage,
    token_sample,
)


def test_counts_are_cl100k_tokens() -> None:
    assert count_tokens("") == 0
    assert count_tokens("hello") == 1
    assert count_tokens("hello world") == 2
    assert count_tokens("How heavy can my parcel be?") == 7


def test_more_text_is_more_tokens_and_repeats_add_up() -> None:
    one = count_tokens("The parcel weighs 150 kg. ")
    assert 8 * one <= count_tokens("The parcel weighs 150 kg. " * 10) <= 10 * one
    assert count_tokens("é" * 100) > 0  # not ASCII: counted, never an error


def test_special_token_strings_are_counted_as_text() -> None:
    # A prompt may contain "<|endoftext|>"; tiktoken refuses it by default, we count it.
    assert count_tokens("<|endoftext|>") > 1


def test_short_texts_are_estimated_exactly() -> None:
    text = "The parcel weighs 150 kg. " * 100
    assert len(text) <= EXACT_CHARS
    assert estimate_tokens(text) == count_tokens(text)
    assert estimate_tokens("") == 0


def test_a_long_text_is_counted_on_bounded_slices_and_lands_near_the_exact_count() -> None:
    text = "".join(
        f"line {i}: the parcel weighs {i % 997} kg, ship it today.\n" for i in range(60_000)
    )
    assert len(text) > 100 * EXACT_CHARS
    exact, estimate = count_tokens(text), estimate_tokens(text)
    assert estimate != 0 and abs(estimate - exact) / exact < 0.05
    sample = token_sample(text)  # what is counted on the event loop: bounded, from all over
    assert len(sample) == EXACT_CHARS
    assert sample.startswith(text[:100]) and sample.endswith(text[-100:])


def test_a_sample_standing_for_a_longer_text_is_scaled_to_its_length() -> None:
    part = "hello world " * 100
    assert estimate_tokens(part, chars=10 * len(part)) == 10 * count_tokens(part)


def test_missing_usage_is_estimated_from_prompt_and_answer_and_marked() -> None:
    payload = {"messages": [{"role": "user", "content": "How heavy can my parcel be?"}]}
    usage = estimate_usage("chat.completions", payload, "hello world")
    assert usage.estimated
    assert (usage.input_tokens, usage.output_tokens) == (7, 2)
