"""Token counts are real and stream pieces always join back into the exact answer."""

from __future__ import annotations

import pytest

from proxy.mock_upstream.answers import compose
from proxy.mock_upstream.behavior import ModelBehaviorSpec
from proxy.mock_upstream.conversation import Prompt
from proxy.mock_upstream.tokens import TokenCounter

TEXTS = [
    "",
    "hi",
    "You said: hello there, how are you doing today?",
    "Zürich → Genève: 🚚📦 ça coûte 12,50 € — 東京都への配送は三日かかります。",
    "<|endoftext|> is plain text here",
    "a" * 1000,
]


@pytest.fixture(scope="module")
def counter() -> TokenCounter:
    return TokenCounter()


@pytest.mark.parametrize("text", TEXTS)
@pytest.mark.parametrize("per_piece", [1, 2, 3, 4, 7])
def test_pieces_join_back_exactly(counter: TokenCounter, text: str, per_piece: int) -> None:
    pieces = counter.split(text, per_piece)
    assert "".join(pieces) == text
    assert all(pieces)
    assert len(pieces) <= max(1, -(-counter.count(text) // per_piece))


def test_counts_are_cl100k_tokens(counter: TokenCounter) -> None:
    assert counter.count("") == 0
    assert counter.count("hello world") == 2
    assert counter.count("<|endoftext|>") > 1  # a special token's text is not the special token


def test_truncate_never_splits_a_character(counter: TokenCounter) -> None:
    text = "🚚📦🚚📦"
    for n in range(counter.count(text) + 1):
        cut = counter.truncate(text, n)
        assert text.startswith(cut) and counter.count(cut) <= n


def test_the_cache_stays_bounded() -> None:
    counter = TokenCounter(cache_size=4)
    for i in range(50):
        counter.count(f"text {i}")
        counter.split(f"text {i}", 1)
        counter.truncate(f"text {i}", 1)
    assert len(counter._ids) <= 4 and len(counter._pieces) <= 4 and len(counter._prefixes) <= 4
    assert counter.count("text 3") == TokenCounter().count("text 3")


def test_compose_counts_prompt_and_answer_the_same_for_stream_and_not(
    counter: TokenCounter,
) -> None:
    spec = ModelBehaviorSpec.model_validate({"cached_tokens": 100, "stream_chunk_tokens": 5})
    texts = ("system rules", "user question about 📦")
    quiet = Prompt("m", False, False, "system rules", texts[1], texts, extra_tokens=3)
    loud = Prompt("m", True, True, "system rules", texts[1], texts, extra_tokens=3)
    a, b = compose(quiet, spec, counter), compose(loud, spec, counter)
    assert a.text == b.text == "".join(b.pieces)
    assert a.input_tokens == b.input_tokens == 3 + sum(counter.count(t) for t in texts)
    assert a.cached_tokens == a.input_tokens  # capped at the prompt size
    assert a.output_tokens == b.output_tokens == counter.count(a.text) == 48
    assert a.finish == "stop" and a.id != b.id
