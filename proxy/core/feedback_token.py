"""Signed per-request feedback tokens: what lets an end user's UI post feedback about exactly one
answer without holding an application token.

Every proxied answer carries `x-mirrorgate-feedback-token`:

    mgf1.<expiry, unix seconds>.<HMAC-SHA256(key, "mgf1" NUL request_id NUL expiry), base64url>

The token names no request: the feedback body does (`request_id`), and the MAC binds the two, so a
token is worth one answer only, until its expiry. The key is shared by every replica (from the
environment, or made once and kept in the store), so any replica checks a token another issued.
Pure: the key and the clock come from the caller.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
from enum import StrEnum

FEEDBACK_TOKEN_HEADER = "x-mirrorgate-feedback-token"
"""The answer header carrying a signed token, and the feedback header presenting one."""

_PREFIX = "mgf1"
_MAX_TOKEN_CHARS = 128
"""Longer is not one of ours (ours are about 60 characters): refused before any work."""


class TokenVerdict(StrEnum):
    """What a presented token is worth for one request id."""

    VALID = "valid"
    MALFORMED = "malformed"
    """Not a token of this shape at all."""
    EXPIRED = "expired"
    """Well signed, past its expiry."""
    FORGED = "forged"
    """Its MAC is not ours for this request id: made up, altered, or another answer's."""


class FeedbackTokens:
    """Issues and checks feedback tokens with one key. Until `load` gives it its key it issues
    none and accepts none (the key comes from the store once it is migrated)."""

    def __init__(self, ttl_s: float, key: bytes | None = None) -> None:
        self.ttl_s = ttl_s
        """How long an issued token stays valid, seconds."""
        self._keyed: hmac.HMAC | None = None
        """The HMAC with the key already absorbed: each token copies it (half the work)."""
        if key is not None:
            self.load(key)

    def load(self, key: bytes) -> None:
        """Use `key` from now on (at least 16 bytes)."""
        if len(key) < 16:
            raise ValueError("a feedback signing key needs at least 16 bytes")
        self._keyed = hmac.new(key, digestmod=hashlib.sha256)

    @property
    def ready(self) -> bool:
        return self._keyed is not None

    def issue(self, request_id: str, now: float) -> str | None:
        """The token for `request_id`, valid until `now` + `ttl_s`; None before `load`."""
        if self._keyed is None:
            return None
        expiry = int(now + self.ttl_s)
        return f"{_PREFIX}.{expiry}.{self._mac(self._keyed, request_id, expiry)}"

    def verify(self, token: str, request_id: str, now: float) -> TokenVerdict:
        """Whether `token` was issued for `request_id` and is still valid at `now`."""
        if self._keyed is None or len(token) > _MAX_TOKEN_CHARS:
            return TokenVerdict.MALFORMED
        prefix, _, rest = token.partition(".")
        expiry_text, _, mac = rest.partition(".")
        if prefix != _PREFIX or not expiry_text.isdigit() or len(expiry_text) > 12 or not mac:
            return TokenVerdict.MALFORMED
        expiry = int(expiry_text)
        expected = self._mac(self._keyed, request_id, expiry)
        if not hmac.compare_digest(mac.encode("ascii", "replace"), expected.encode()):
            return TokenVerdict.FORGED
        # Checked after the MAC: an expiry moved forward is a forgery, not an expiry.
        if expiry < now:
            return TokenVerdict.EXPIRED
        return TokenVerdict.VALID

    @staticmethod
    def _mac(keyed: hmac.HMAC, request_id: str, expiry: int) -> str:
        mac = keyed.copy()
        mac.update(b"%s\x00%s\x00%d" % (_PREFIX.encode(), request_id.encode(), expiry))
        return base64.urlsafe_b64encode(mac.digest()).rstrip(b"=").decode()


def caller_id(kind: str, secret: str) -> str:
    """A short, non-secret name of a caller: `kind:` and the first 8 hex digits of the SHA-256 of
    `secret` (an application token, a client address, a user id). Never the secret itself."""
    return f"{kind}:{hashlib.sha256(secret.encode('utf-8', 'replace')).hexdigest()[:8]}"
