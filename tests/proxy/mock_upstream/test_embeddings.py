"""The fake model's embeddings: requests read strictly, one deterministic unit vector per input."""

from __future__ import annotations

import base64
import math
from array import array

import orjson
import pytest

from proxy.mock_upstream.conversation import RequestError
from proxy.mock_upstream.embeddings import (
    embedding_vector,
    embeddings_body,
    read_embedding_request,
)
from proxy.mock_upstream.tokens import TokenCounter


def test_inputs_in_every_accepted_shape() -> None:
    assert read_embedding_request({"model": "m", "input": "one"}).inputs == ("one",)
    assert read_embedding_request({"model": "m", "input": ["a", "b"]}).inputs == ("a", "b")
    assert read_embedding_request({"model": "m", "input": [1, 2, 3]}).inputs == ((1, 2, 3),)
    request = read_embedding_request(
        {"model": "m", "input": [[1, 2], "x"], "dimensions": 8, "encoding_format": "base64"}
    )
    assert request.inputs == ((1, 2), "x") and request.dimensions == 8 and request.base64


@pytest.mark.parametrize(
    ("body", "why"),
    [
        ({"model": "m", "input": []}, "'input'"),
        ({"model": "m", "input": [1.5]}, "'input'"),
        ({"model": "m", "input": "x", "dimensions": 0}, "'dimensions'"),
        ({"model": "m", "input": "x", "encoding_format": "hex"}, "'encoding_format'"),
    ],
)
def test_what_cannot_be_answered_is_a_400(body: dict[str, object], why: str) -> None:
    with pytest.raises(RequestError) as info:
        read_embedding_request(body)
    assert info.value.status == 400 and why in info.value.message


def test_vectors_are_deterministic_unit_vectors_that_differ_by_input() -> None:
    first = embedding_vector("hello", 16)
    assert len(first) == 16 and first == embedding_vector("hello", 16)
    assert math.isclose(math.sqrt(sum(v * v for v in first)), 1.0, rel_tol=1e-5)
    assert embedding_vector("hello!", 16) != first
    assert embedding_vector((1, 2), 16) != embedding_vector((2, 1), 16)


def test_the_body_in_both_encodings_with_usage() -> None:
    tokens = TokenCounter()
    request = read_embedding_request({"model": "m", "input": ["a b", [7, 8, 9]]})
    body = orjson.loads(embeddings_body(request, 4, tokens, usage=True))
    assert [item["index"] for item in body["data"]] == [0, 1]
    assert body["usage"] == {"prompt_tokens": tokens.count("a b") + 3,
                             "total_tokens": tokens.count("a b") + 3}  # fmt: skip
    as_floats = body["data"][0]["embedding"]
    encoded = read_embedding_request({"model": "m", "input": "a b", "encoding_format": "base64"})
    raw = orjson.loads(embeddings_body(encoded, 4, tokens, usage=False))
    assert "usage" not in raw
    decoded = array("f", base64.b64decode(raw["data"][0]["embedding"])).tolist()
    assert decoded == pytest.approx(as_floats)
