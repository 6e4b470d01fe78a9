"""Our own token counts (for upstreams that report no usage): cl100k, offline, never refusing."""

from __future__ import annotations

from proxy.upstream.tokens import count_tokens


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
