"""OpenAI embeddings (`/v1/embeddings`): deterministic unit vectors derived from the input.

Each input (a string, or a list of token ids) is hashed with SHAKE-256 into `dimensions` 32-bit
numbers, mapped to [-1, 1) and normalised to length 1 — the same input always gets the same
vector. Values are float32, so `encoding_format: base64` (little-endian float32, as OpenAI sends
it) and `float` carry exactly the same numbers.
"""

from __future__ import annotations

import base64
import hashlib
import math
import struct
import sys
from array import array
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import orjson

from proxy.mock_upstream.conversation import RequestError
from proxy.mock_upstream.tokens import TokenCounter
from proxy.mock_upstream.wire import require_model


@dataclass(frozen=True, slots=True)
class EmbeddingRequest:
    """What an embeddings request asks for."""

    model: str
    inputs: tuple[str | tuple[int, ...], ...]
    dimensions: int | None
    base64: bool


def read_embedding_request(body: Mapping[str, Any]) -> EmbeddingRequest:
    """The embeddings request in `body`; raises `RequestError` when it cannot be answered."""
    model = require_model(body)
    raw = body.get("input")
    if isinstance(raw, str) or (isinstance(raw, list) and raw and isinstance(raw[0], int)):
        raw = [raw]
    if not isinstance(raw, list) or not raw:
        raise RequestError("'input' must be a string, an array of strings or of token arrays")
    inputs: list[str | tuple[int, ...]] = []
    for item in raw:
        if isinstance(item, str):
            inputs.append(item)
        elif isinstance(item, list) and all(isinstance(i, int) for i in item):
            inputs.append(tuple(item))
        else:
            raise RequestError("'input' must be a string, an array of strings or of token arrays")
    dimensions = body.get("dimensions")
    if dimensions is not None and (not isinstance(dimensions, int) or not 1 <= dimensions <= 8192):
        raise RequestError("'dimensions' must be an integer between 1 and 8192")
    encoding = body.get("encoding_format", "float")
    if encoding not in ("float", "base64"):
        raise RequestError("'encoding_format' must be 'float' or 'base64'")
    return EmbeddingRequest(model, tuple(inputs), dimensions, encoding == "base64")


def embedding_vector(value: str | tuple[int, ...], dimensions: int) -> array[float]:
    """The unit vector for one input."""
    seed = value.encode() if isinstance(value, str) else orjson.dumps(value)
    raw = struct.unpack(f"<{dimensions}I", hashlib.shake_256(seed).digest(4 * dimensions))
    values = [n / 2147483648.0 - 1.0 for n in raw]
    norm = math.sqrt(sum(v * v for v in values)) or 1.0
    return array("f", [v / norm for v in values])


def embeddings_body(
    request: EmbeddingRequest, dimensions: int, tokens: TokenCounter, usage: bool
) -> bytes:
    """The `{"object": "list", "data": [...]}` response, with usage unless switched off."""
    data = []
    for index, value in enumerate(request.inputs):
        vector = embedding_vector(value, dimensions)
        encoded: Any
        if request.base64:
            if sys.byteorder == "big":
                vector.byteswap()
            encoded = base64.b64encode(vector.tobytes()).decode()
        else:
            encoded = vector.tolist()
        data.append({"object": "embedding", "index": index, "embedding": encoded})
    payload: dict[str, Any] = {"object": "list", "data": data, "model": request.model}
    if usage:
        counted = sum(
            tokens.count(value) if isinstance(value, str) else len(value)
            for value in request.inputs
        )
        payload["usage"] = {"prompt_tokens": counted, "total_tokens": counted}
    return orjson.dumps(payload)
