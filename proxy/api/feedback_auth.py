"""Who may post feedback, and who they are: the credentials of `POST /v1/feedback`.

A post carries one of:

- **an application token**: `Authorization: Bearer <token>`, one of the comma-separated tokens in
  the variable named by `server.feedback_tokens_env`. The caller is the application,
  `app:<first 8 hex of the token's SHA-256>` — or, when the body names its end user (`user`),
  `app:…/user:…`: an application vouches for its users, so the judge's per-caller cap applies per
  user;
- **a signed feedback token**: `x-mirrorgate-feedback-token: <token>`, the header of the answer the
  feedback is about (`proxy.core.FeedbackTokens`): valid for that request id only, until it
  expires. The caller is the client address, `addr:…` (the token says which answer, not who).
  For an outcome (`POST /v1/outcomes`), the token of any answer of the operation will do
  (`check_signed_for_any`).

Without either the post is refused (401), unless feedback is open (`proxy.config.feedback_open`:
a loopback listener with no feedback auth configured), where the caller is the client address.
Tokens are compared by their SHA-256, in constant time; no token is ever stored or logged.
"""

from __future__ import annotations

import hashlib
import hmac
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

from fastapi import Request

from proxy.core import FEEDBACK_TOKEN_HEADER, AuthError, FeedbackTokens, TokenVerdict, caller_id


class FeedbackAuthError(AuthError):
    """401 for feedback; `reason` is the `mirrorgate_feedback_rejected_total` label."""

    def __init__(self, message: str, reason: str) -> None:
        super().__init__(message)
        self.reason = reason


@dataclass(frozen=True, slots=True)
class FeedbackCredential:
    """What a post presented, checked as far as it can be before its body is read."""

    caller: str
    """The caller's short non-secret id (`proxy.core.caller_id`): the rate limit's key."""
    signed_token: str | None = None
    """A signed token still to be checked against the body's request id."""
    application: bool = False
    """An application token: the body's `user`, if any, refines the caller."""

    def caller_of(self, user: str | None) -> str:
        """The caller stored with the feedback, given the body's `user`."""
        if self.application and user:
            return f"{self.caller}/{caller_id('user', user)}"
        return self.caller


class FeedbackAuth:
    """Checks the credentials of feedback posts."""

    def __init__(
        self,
        app_tokens: Sequence[str],
        tokens: FeedbackTokens,
        *,
        open_without_token: bool,
        tokens_env: str,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._apps = {hashlib.sha256(t.encode()).digest(): caller_id("app", t) for t in app_tokens}
        self.tokens = tokens
        self.open_without_token = open_without_token
        self._tokens_env = tokens_env
        self._clock = clock

    def credential(self, request: Request) -> FeedbackCredential:
        """The post's credential from its headers: an application token of ours, else a signed
        token (still to be checked), else — where feedback is open — the client address. Raises
        `FeedbackAuthError` otherwise (an `Authorization` that is not one of our tokens, with no
        signed token beside it, is `bad_token`)."""
        header = request.headers.get("authorization", "")
        signed = request.headers.get(FEEDBACK_TOKEN_HEADER, "").strip()
        address = request.client.host if request.client is not None else "unknown"
        scheme, _, given = header.partition(" ")
        app = None
        if self._apps and scheme.lower() == "bearer" and given.strip():
            app = self._application(given.strip())
        if app is not None:
            return FeedbackCredential(app, application=True)
        if signed:  # checked against the body's request id once it is read
            return FeedbackCredential(caller_id("addr", address), signed_token=signed)
        if self._apps and header:
            raise FeedbackAuthError("the feedback application token is not right", "bad_token")
        if self.open_without_token:
            return FeedbackCredential(caller_id("addr", address))
        raise FeedbackAuthError(
            f"feedback needs an application token ('Authorization: Bearer <token>', from "
            f"{self._tokens_env}) or the '{FEEDBACK_TOKEN_HEADER}' header of the answer",
            "unauthenticated",
        )

    def check_signed(self, credential: FeedbackCredential, request_id: str) -> None:
        """Raises `FeedbackAuthError` unless `credential`'s signed token (if it has one) was
        issued for `request_id` and has not expired."""
        if credential.signed_token is None:
            return
        verdict = self.tokens.verify(credential.signed_token, request_id, self._clock())
        if verdict is TokenVerdict.EXPIRED:
            raise FeedbackAuthError("the feedback token has expired", "expired")
        if verdict is not TokenVerdict.VALID:
            raise FeedbackAuthError(
                f"the feedback token is not valid for request id '{request_id[:128]}'", "bad_token"
            )

    def check_signed_for_any(
        self, credential: FeedbackCredential, request_ids: Iterable[str]
    ) -> None:
        """Raises `FeedbackAuthError` unless `credential`'s signed token (if it has one) was
        issued for one of `request_ids` (the requests of one business operation) and has not
        expired."""
        if credential.signed_token is None:
            return
        now = self._clock()
        expired = False
        for request_id in request_ids:
            verdict = self.tokens.verify(credential.signed_token, request_id, now)
            if verdict is TokenVerdict.VALID:
                return
            if verdict is TokenVerdict.MALFORMED:
                break
            expired = expired or verdict is TokenVerdict.EXPIRED
        if expired:
            raise FeedbackAuthError("the feedback token has expired", "expired")
        raise FeedbackAuthError(
            "the feedback token is not valid for any request of this operation", "bad_token"
        )

    def _application(self, given: str) -> str | None:
        digest = hashlib.sha256(given.encode("utf-8", "replace")).digest()
        found = None
        for known, app in self._apps.items():  # every entry, so the time says nothing
            if hmac.compare_digest(digest, known):
                found = app
        return found
