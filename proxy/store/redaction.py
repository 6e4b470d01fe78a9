"""Masking secrets and e-mail addresses in stored bodies (`store.bodies: redacted`).

`redact` replaces each API key, token and e-mail address it recognises with `[REDACTED:<kind>]`:

==================  ===========================================================================
kind                what it matches
==================  ===========================================================================
``secret_field``    the string value of a JSON field named like a secret (``"api_key": "…"``,
                    ``"password"``, ``"access_token"``, ``"authorization"`` …); the name stays
``bearer_token``    the credential after ``Bearer `` when it is 16+ token characters long
``anthropic_key``   ``sk-ant-…`` (20+ key characters after ``sk-``)
``openai_key``      ``sk-…``, ``sk-proj-…``, ``sk-svcacct-…`` (20+ key characters after ``sk-``)
``github_token``    ``ghp_``, ``gho_``, ``ghu_``, ``ghs_``, ``ghr_`` tokens and ``github_pat_…``
``aws_key``         AWS access key ids ``AKIA…`` / ``ASIA…`` (16 more upper-case characters)
``email``           ``local@domain.tld`` (the last 64 characters of the local part at most)
==================  ===========================================================================

Speed matters twice over: bodies can be 10 MB and come from anyone, and redaction runs on the
recorder's thread while the event loop waits for the GIL. So every pattern starts with a literal
(`sk-`, `gh`, `earer`, `@`, …) that the regex engine finds with a fast scan, and only then checks
what precedes it with a fixed-width lookbehind; repetitions are possessive (`++`, `*+`), so a failed
attempt never backtracks over what it consumed. Every pass is linear in the text, and typical JSON
costs about ten nanoseconds a character for all passes together.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable
from typing import TypeVar

from proxy.core import ExchangeRecord

T = TypeVar("T")

_SECRET_FIELD = re.compile(
    r'("(?=[AaCcIiPpRrSsTtXx])(?i:api[_-]?key|x-api-key|apikey|secret|secret[_-]?key|client[_-]?secret|access[_-]?key'
    r"|password|passwd|token|access[_-]?token|refresh[_-]?token|id[_-]?token|auth[_-]?token"
    r'|authorization|private[_-]?key)"\s*+:\s*+")(?:[^"\\]|\\.)*+"',
    re.ASCII,
)
_BEARER = re.compile(
    r"earer(?<=[Bb]earer)(?<![A-Za-z0-9_][Bb]earer)([ \t]++)[A-Za-z0-9._~+/=-]{16,}+", re.ASCII
)
_SK_KEY = re.compile(r"sk-(?<![A-Za-z0-9_-]sk-)[A-Za-z0-9_-]{20,}+", re.ASCII)
_GITHUB = re.compile(
    r"g(?<![A-Za-z0-9_]g)(?:h[pousr]_[A-Za-z0-9]{36,}+|ithub_pat_\w{22,}+)", re.ASCII
)
_AWS = re.compile(r"A(?:KIA|SIA)(?<![A-Za-z0-9]A...)[A-Z0-9]{16}(?![A-Za-z0-9])", re.ASCII)
_EMAIL_DOMAIN = re.compile(r"@[A-Za-z0-9-]++(?:\.[A-Za-z0-9-]++)++", re.ASCII)
_EMAIL_LOCAL = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._%+-")
_EMAIL_LOCAL_MAX = 64


def _sk_kind(match: re.Match[str]) -> str:
    kind = "anthropic_key" if match.group().startswith("sk-ant-") else "openai_key"
    return f"[REDACTED:{kind}]"


_PASSES: tuple[tuple[str, re.Pattern[str], str | Callable[[re.Match[str]], str]], ...] = (
    ('"', _SECRET_FIELD, r'\1[REDACTED:secret_field]"'),
    ("earer", _BEARER, r"earer\1[REDACTED:bearer_token]"),
    ("sk-", _SK_KEY, _sk_kind),
    ("g", _GITHUB, "[REDACTED:github_token]"),
    ("A", _AWS, "[REDACTED:aws_key]"),
)
"""(a substring every match contains, pattern, replacement), applied in this order: a secret
field's value is masked whole before the key patterns could mask a part of it."""


def redact(text: str) -> str:
    """`text` with every recognised secret and e-mail address replaced by `[REDACTED:<kind>]`."""
    for needle, pattern, replacement in _PASSES:
        if needle in text:
            text = pattern.sub(replacement, text)
    return _redact_emails(text) if "@" in text else text


def _redact_emails(text: str) -> str:
    # The pattern finds the `@domain` part; the local part is walked back from the `@` (never
    # further than the previous address, nor more than 64 characters), which a forward regex
    # could only do by trying every position in the text.
    pieces: list[str] = []
    done = 0
    for match in _EMAIL_DOMAIN.finditer(text):
        at = match.start()
        start = at
        floor = max(done, at - _EMAIL_LOCAL_MAX)
        while start > floor and text[start - 1] in _EMAIL_LOCAL:
            start -= 1
        if start == at:
            continue
        pieces.append(text[done:start])
        pieces.append("[REDACTED:email]")
        done = match.end()
    if not pieces:
        return text
    pieces.append(text[done:])
    return "".join(pieces)


def apply_bodies_policy(record: T, policy: str) -> T:
    """`record` with its bodies as `store.bodies` says: `full` unchanged, `none` dropped,
    `redacted` passed through `redact`. Records without bodies (pairs) are returned as they are."""
    if policy == "full" or not isinstance(record, ExchangeRecord):
        return record
    bodies = (record.request_body, record.response_body, record.response_text)
    if bodies == (None, None, None):
        return record
    if policy == "none":
        return dataclasses.replace(
            record, request_body=None, response_body=None, response_text=None
        )
    return dataclasses.replace(
        record,
        request_body=None if record.request_body is None else redact(record.request_body),
        response_body=None if record.response_body is None else redact(record.response_body),
        response_text=None if record.response_text is None else redact(record.response_text),
    )
