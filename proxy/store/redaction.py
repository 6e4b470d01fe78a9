"""Masking secrets and e-mail addresses in every stored and logged text (`store.bodies`).

`redact` replaces each API key, token and e-mail address it recognises with `[REDACTED:<kind>]`:

==================  ===========================================================================
kind                what it matches
==================  ===========================================================================
``secret_field``    the string value of a JSON field named like a secret (``"api_key": "…"``,
                    ``"password"``, ``"access_token"``, ``"authorization"`` …); the name stays.
                    Also further down, in JSON held inside a JSON string
                    (``"{\\"api_key\\": \\"…\\"}"``)
``secret_pair``     the value of ``password=…``, ``api_key: …``, ``aws_secret_access_key=…``
                    and the like, outside JSON (query strings, env files, prose)
``bearer_token``    the credential after ``Bearer `` when it is 16+ token characters long
``private_key``     a PEM ``-----BEGIN … PRIVATE KEY-----`` block, to its END line
``anthropic_key``   ``sk-ant-…`` (20+ key characters after ``sk-``)
``openai_key``      ``sk-…``, ``sk-proj-…``, ``sk-svcacct-…`` (20+ key characters after ``sk-``)
``stripe_key``      ``sk_live_…``, ``rk_live_…``, ``sk_test_…``, ``rk_test_…``
``github_token``    ``ghp_``, ``gho_``, ``ghu_``, ``ghs_``, ``ghr_`` tokens and ``github_pat_…``
``aws_key``         AWS access key ids ``AKIA…`` / ``ASIA…`` (16 more upper-case characters)
``google_key``      Google API keys ``AIza…`` (35 more key characters)
``slack_token``     ``xoxa-``, ``xoxb-``, ``xoxp-``, ``xoxr-``, ``xoxs-``, ``xoxe-`` tokens and
                    ``xapp-`` app tokens
``slack_webhook``   the secret path of ``hooks.slack.com/services/…`` (and ``workflows``,
                    ``triggers``) URLs
``jwt``             JSON Web Tokens ``eyJ….eyJ….…``
``email``           ``local@domain.tld``, local part and domain in any script (``jörg@bücher.de``,
                    also written with JSON ``\\uXXXX`` escapes); the last 64 characters of the
                    local part at most
==================  ===========================================================================

Speed matters twice over: bodies can be 10 MB and come from anyone, and redaction runs on the
recorder's thread while the event loop waits for the GIL. So every pattern starts with a literal
(`sk-`, `gh`, `earer`, `@`, …) that the regex engine finds with a fast scan, and only then checks
what precedes it with a fixed-width lookbehind; repetitions are possessive (`++`, `*+`), so a
failed attempt never backtracks over what it consumed. Every pass is linear in the text. A pass
runs only when the text holds characters that every one of its matches holds, each found with
`memchr` (`J` and `.` for a JWT, `_` and `g` for a GitHub token, `\\` for JSON inside JSON), then
its literal: in a body without secrets most passes cost a few nanoseconds, not a scan.

Where it applies (`StoredText`, one per store): with `store.bodies: redacted` every text column the
store writes (bodies, check reasons, finding details, rule-change prompt diffs, feedback
corrections and labels, rollout reasons and evidence, verdict reasons); with `none` no
answer-derived text at all (bodies, prompt diffs, check reasons beyond the check's verdict, finding
details, correction texts are not stored) and the rest redacted; with `full` everything as
received. Log lines that carry such text pass through `redact` whatever the policy.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable
from typing import Literal, TypeVar

from proxy.core import CheckRecord, ExchangeRecord, FindingRecord, ProbeRecord

T = TypeVar("T")
BodiesPolicy = Literal["full", "redacted", "none"]

_SECRET_NAMES = (
    r"(?=[AaCcIiPpRrSsTtXx])(?i:api[_-]?key|x-api-key|apikey|secret|secret[_-]?key"
    r"|client[_-]?secret|access[_-]?key|(?:aws[_-]?)?secret[_-]?access[_-]?key"
    r"|password|passwd|token|access[_-]?token|refresh[_-]?token|id[_-]?token|auth[_-]?token"
    r"|authorization|private[_-]?key)"
)
_SECRET_FIELD = re.compile(
    r'("' + _SECRET_NAMES + r'"\s*+:\s*+")(?:[^"\\]|\\.)*+"',
    re.ASCII,
)
# The same field further down, in JSON written inside a JSON string (inside a JSON string …):
# every quote of the inner document is escaped by the same run of backslashes. The value ends at
# the first escaped quote.
_SECRET_FIELD_ESCAPED = re.compile(
    r'((\\++)"' + _SECRET_NAMES + r'\2"\s*+:\s*+\2")(?:[^"\\]|\\(?!\\*+"))*+(\\*+)"',
    re.ASCII,
)
_PAIR_NAMES = (
    "password",
    "passwd",
    "pwd",
    "secret",
    "api_key",
    "api-key",
    "apikey",
    "token",
    "secret_key",
    "access_key",
    "private_key",
)
"""Names whose `=`/`:` value is a secret; `client_secret`, `access_token`, `auth_token` and
`aws_secret_access_key` end in one of them."""
# Anchored on the separator, one pattern per separator character so that the regex engine scans
# for a single literal (a character class would be tried at every position); then one fixed-width
# lookbehind per name, with and without a space before the separator, checks the name before it.
_PAIR_VALUE = r"([ \t]*+)(?!\[REDACTED)[^\s\"'\\,;&<>()\[\]{}]{3,}+"


def _pair_pattern(separator: str) -> re.Pattern[str]:
    names = "|".join(
        f"(?<={name}{space}{separator})" for name in _PAIR_NAMES for space in ("", " ")
    )
    # Every name ends in d, t, y or n: one cheap check first (JSON's `": ` fails it at once).
    last = f"(?<=[dtyn ]{separator})"
    return re.compile(f"{separator}{last}(?:{names}){_PAIR_VALUE}", re.ASCII | re.IGNORECASE)


_SECRET_PAIR_EQUALS = _pair_pattern("=")
_SECRET_PAIR_COLON = _pair_pattern(":")
_BEARER = re.compile(
    r"earer(?<=[Bb]earer)(?<![A-Za-z0-9_][Bb]earer)([ \t]++)[A-Za-z0-9._~+/=-]{16,}+", re.ASCII
)
_PEM = re.compile(
    r"-----BEGIN [A-Z0-9 ]{0,40}PRIVATE KEY-----(?:[^-]++|-(?!----END ))*+"
    r"(?:-----END [A-Z0-9 ]{0,40}PRIVATE KEY-----)?",
    re.ASCII,
)
_SK_KEY = re.compile(r"sk-(?<![A-Za-z0-9_-]sk-)[A-Za-z0-9_-]{20,}+", re.ASCII)
_STRIPE = re.compile(
    r"k_(?<![A-Za-z0-9][rs]k_)(?<=[rs]k_)(?:live|test)_[A-Za-z0-9]{10,}+", re.ASCII
)
# Two patterns, so that the regex engine scans for `gh` and `github_pat_` rather than trying at
# every `g` of the text.
_GITHUB = re.compile(r"gh(?<![A-Za-z0-9_]gh)[pousr]_[A-Za-z0-9]{36,}+", re.ASCII)
_GITHUB_PAT = re.compile(r"github_pat_(?<![A-Za-z0-9_]github_pat_)\w{22,}+", re.ASCII)
_AWS = re.compile(r"A(?:KIA|SIA)(?<![A-Za-z0-9]A...)[A-Z0-9]{16}(?![A-Za-z0-9])", re.ASCII)
_GOOGLE = re.compile(r"AIza(?<![A-Za-z0-9_-]AIza)[A-Za-z0-9_-]{35}", re.ASCII)
_SLACK = re.compile(r"x(?<![A-Za-z0-9_-]x)(?:ox[abeoprs]|app)-[A-Za-z0-9-]{10,}+", re.ASCII)
_SLACK_HOOK = re.compile(
    r"hooks\.slack\.com/(?:services|workflows|triggers)/[A-Za-z0-9_/-]++", re.ASCII
)
_JWT = re.compile(
    r"eyJ(?<![A-Za-z0-9_-]eyJ)[A-Za-z0-9_-]{4,}+\.eyJ[A-Za-z0-9_-]{4,}+\.[A-Za-z0-9_-]*+",
    re.ASCII,
)
_EMAIL_DOMAIN = re.compile(
    r"@(?:[^\W_]|-|\\u[0-9A-Fa-f]{4})++(?:\.(?:[^\W_]|-|\\u[0-9A-Fa-f]{4})++)++"
)
_EMAIL_LOCAL = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._%+-")
_HEX4 = re.compile(r"u[0-9A-Fa-f]{4}")
_ASCII_LOCAL_RUN = re.compile(r"[A-Za-z0-9._%+-]++")
_EMAIL_LOCAL_MAX = 64


def _sk_kind(match: re.Match[str]) -> str:
    kind = "anthropic_key" if match.group().startswith("sk-ant-") else "openai_key"
    return f"[REDACTED:{kind}]"


@dataclasses.dataclass(frozen=True, slots=True)
class _Pass:
    """One pattern and its replacement, run only when the text holds each of `chars` and, if
    set, `needle`: characters and a substring that every match contains, so that skipping the
    pass never changes the result. A character is found with `memchr` (some 30 ns in a 1 KB
    body) where a longer substring or a regex scan costs 15-100 times as much, and the characters
    are picked among those a chat body seldom holds (`J`, `G`, `z`, `\\`, `/`), so that most
    passes end there."""

    pattern: re.Pattern[str]
    replacement: str | Callable[[re.Match[str]], str]
    chars: str
    needle: str = ""
    folded: tuple[str, ...] = ()
    """Then one of these in the lower-cased text (for the case-insensitive field names)."""


# Every name of `_SECRET_NAMES` ends in one of these words: a field's match holds `word"` in the
# lower-cased text (escaped, `word\\`). Six substring searches cost a third of the regex's attempt
# at every `"` of a JSON body.
_SECRET_ENDINGS = ("authorization", "password", "passwd", "secret", "token", "key")

_PASSES = (
    _Pass(
        _SECRET_FIELD,
        r'\1[REDACTED:secret_field]"',
        '":',
        folded=tuple(f'{end}"' for end in _SECRET_ENDINGS),
    ),
    _Pass(
        _SECRET_FIELD_ESCAPED,
        r'\1[REDACTED:secret_field]\3"',
        '\\":',
        '\\"',
        folded=tuple(f"{end}\\" for end in _SECRET_ENDINGS),
    ),
    _Pass(_PEM, "[REDACTED:private_key]", "G-", "-----BEGIN "),
    _Pass(_BEARER, r"earer\1[REDACTED:bearer_token]", "", "earer"),
    _Pass(_JWT, "[REDACTED:jwt]", "J.", "eyJ"),
    _Pass(_SK_KEY, _sk_kind, "-", "sk-"),
    _Pass(_STRIPE, "k_[REDACTED:stripe_key]", "_", "k_"),
    _Pass(_GITHUB, "[REDACTED:github_token]", "_g"),
    _Pass(_GITHUB_PAT, "[REDACTED:github_token]", "_g", "github_pat_"),
    _Pass(_AWS, "[REDACTED:aws_key]", "AI"),
    _Pass(_GOOGLE, "[REDACTED:google_key]", "zAI", "AIza"),
    _Pass(_SLACK, "[REDACTED:slack_token]", "x-"),
    _Pass(_SLACK_HOOK, "hooks.slack.com/[REDACTED:slack_webhook]", "/", "hooks.slack.com/"),
    _Pass(_SECRET_PAIR_EQUALS, r"=\1[REDACTED:secret_pair]", "="),
    _Pass(_SECRET_PAIR_COLON, r":\1[REDACTED:secret_pair]", ":"),
)
"""Applied in this order: a secret field's value is masked whole before the key patterns could
mask a part of it, and the generic `name=value` pairs come last so that a recognised key keeps
its own kind."""


def redact(text: str) -> str:
    """`text` with every recognised secret and e-mail address replaced by `[REDACTED:<kind>]`."""
    folded: str | None = None  # `text.lower()`, made when a pass first asks for it
    for step in _PASSES:
        for char in step.chars:  # a loop, not all(): no generator per pass
            if char not in text:
                break
        else:
            if step.needle and step.needle not in text:
                continue
            if step.folded:
                if folded is None:
                    folded = text.lower()
                for word in step.folded:
                    if word in folded:
                        break
                else:
                    continue
            text, count = step.pattern.subn(step.replacement, text)
            if count:
                folded = None  # fold the new text if a later pass asks
    return _redact_emails(text) if "@" in text else text


def _local_char(char: str) -> bool:
    return char in _EMAIL_LOCAL or (char > "\x7f" and char.isalnum())


def _local_start(text: str, at: int, floor: int) -> int:
    """Where the local part of the address whose `@` is at `at` starts. A JSON `\\uXXXX` escape
    is part of it (a non-ASCII letter, as JSON writers escape it); another escape (`\\n`) ends
    it, the escaped character excluded."""
    # Most local parts are plain ASCII after a space or a quote: one regex match on the reversed
    # window finds that run; only a backslash or a non-ASCII character before it needs the walk.
    run = _ASCII_LOCAL_RUN.match(text[floor:at][::-1])
    start = at - (run.end() if run else 0)
    if start == floor or (text[start - 1] != "\\" and text[start - 1] <= "\x7f"):
        return start
    return _walk_local_start(text, at, start, floor)


def _walk_local_start(text: str, at: int, start: int, floor: int) -> int:
    """`_local_start`'s walk back, one character at a time, from `start` (`at` the `@`)."""
    while start > floor:
        char = text[start - 1]
        if char != "\\":
            if not _local_char(char):
                break
            start -= 1
            continue
        run = 1
        while start - 1 - run >= 0 and text[start - 1 - run] == "\\":
            run += 1
        if run % 2 == 0:  # escaped backslashes: not part of the address
            break
        if _HEX4.fullmatch(text, start, start + 5) and text[start] == "u":
            start -= 1  # the backslash of a `\\uXXXX` inside the local part
            continue
        return min(start + 1, at)  # `\\n` and the like: the escaped character is not in it
    return start


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
        start = _local_start(text, at, floor)
        if start == at:
            continue
        pieces.append(text[done:start])
        pieces.append("[REDACTED:email]")
        done = match.end()
    if not pieces:
        return text
    pieces.append(text[done:])
    return "".join(pieces)


NOT_KEPT = "(not kept: store.bodies is none)"
"""What stands in for answer-derived text (a check's explanation, a finding's detail) under
`store.bodies: none`."""


@dataclasses.dataclass(frozen=True, slots=True)
class StoredText:
    """The `store.bodies` policy for every text the store writes, applied by the store itself
    (the recorder's records and each query object's rows), on the thread that writes."""

    policy: BodiesPolicy = "full"

    def __post_init__(self) -> None:
        if self.policy not in ("full", "redacted", "none"):
            raise ValueError(f"bodies must be full, redacted or none, not {self.policy!r}")

    def text(self, value: str | None) -> str | None:
        """A text that is not the answer's (a reason, a label): as received under `full`,
        redacted otherwise."""
        if value is None or self.policy == "full":
            return value
        return redact(value)

    def derived(self, value: str | None) -> str | None:
        """A text made from the request or the answer (a correction, a prompt diff): as
        received under `full`, redacted under `redacted`, not stored (None) under `none`."""
        if value is None or self.policy == "full":
            return value
        return None if self.policy == "none" else redact(value)


def apply_bodies_policy(record: T, policy: str) -> T:
    """`record` as `store.bodies` says: `full` unchanged; `none` without bodies, a check's
    reason or a finding's detail replaced by `NOT_KEPT` and a probe's answered value dropped;
    `redacted` with all of them passed through `redact`. Records without text of the answer
    (pairs) are returned as they are."""
    if policy == "full":
        return record
    if isinstance(record, CheckRecord):
        reason = NOT_KEPT if policy == "none" else redact(record.reason)
        return record if reason == record.reason else dataclasses.replace(record, reason=reason)
    if isinstance(record, ProbeRecord):  # the value an answer stated is the answer's words
        if record.answered_value is None:
            return record
        answered = None if policy == "none" else redact(record.answered_value)
        if answered == record.answered_value:
            return record
        return dataclasses.replace(record, answered_value=answered)
    if isinstance(record, FindingRecord):
        if not record.detail:
            return record
        detail = NOT_KEPT if policy == "none" else redact(record.detail)
        return record if detail == record.detail else dataclasses.replace(record, detail=detail)
    if not isinstance(record, ExchangeRecord):
        return record
    bodies = (record.request_body, record.response_body, record.response_text)
    if bodies == (None, None, None):
        return record
    if policy == "none":
        stripped = record.with_bodies(None, None, None)
    else:
        request, response, text = (None if body is None else redact(body) for body in bodies)
        stripped = record.with_bodies(request, response, text)
    return stripped  # type: ignore[return-value]  # T is ExchangeRecord on this branch
