"""Which version of a rule set a request carries, found from its headers and system prompt.

`resolve_version` is the one resolver: the gateway calls it on every request of a governed route,
so what is tested here is what runs. It tries, in order:

1. **header** — with `version: header:<name>`, the first header of that name (any case) whose
   value, trimmed of ASCII whitespace, is 1-64 characters of `[A-Za-z0-9._:-]`, is the version as
   given (any other value is ignored: it would become a metric label);
2. **match_prompt** — the first version, in config order, whose regex is found in the system
   prompt, searched in its first `MATCH_MAX_CHARS` characters only (like the regex checks): a
   1 MB system prompt must not make a regex slow on the client path;
3. **fingerprint** — `fp-` and `fingerprint(system_prompt)`: so that a prompt edit is a new rule
   version with no configuration at all. The `fp-` keeps a fingerprint from ever looking like a
   version name; `fp-<12 hex>` is what stores and dashboards already hold.

A request with no system prompt (an embeddings or completions call, a chat without a system
message, a prompt of whitespace only) has no rule version at all: `resolve_version` answers None,
whatever its headers say. The rule's checks are about following instructions, and there are none.

`fingerprint` normalises before hashing, in this order:

1. Unicode NFC;
2. each of the rule's `fingerprint_ignore` regexes, in order: every match becomes `<ignored>`;
3. the built-in masks (`mask_tokens`) replace the tokens a template fills in per request with a
   placeholder: e-mail addresses (`<email>`), UUIDs (`<uuid>`), dates with an optional time
   (`2026-12-01`, `2026-12-01T23:05:00Z`, `01/12/2026`, `1.12.2026`, `December 1, 2026`,
   `1 Dec 2026`, `Tuesday, December 1`: `<date>`), times with seconds (`23:05:07`) or after a
   cue such as `current time` or `now` (`now 23:05`: `<time>`), hex ids of 16 or more digits
   (`<hex>`), ticket ids (`#12345`, `TICKET-1234`: `<ticket>`) and runs of 6 or more digits
   (`<number>`), in the prompt's first `MASK_MAX_CHARS` characters. What a rule is made of
   stays: numbers of up to 5 digits (`max_weight = 150`), decimals, versions (`v1.2.10`), plain
   clock times (`open 9:00-17:00`), `GPT-4`, a month and day without a year or weekday;
4. every run of whitespace collapsed to one space, leading and trailing whitespace stripped.

Steps 1, 2 and 4 apply to the prompt's first `NORMALIZE_MAX_CHARS` characters; the rest (of a
prompt longer than 256 K characters) is hashed as it is, so that a 10 MB prompt costs the client
path a hash (about 15 ms), not a normalisation (over 300 ms). Prompts up to that length have the
fingerprint they always had.

Case is kept (`MAX_WEIGHT` and `max_weight` may mean different things to a model). A prompt with
none of these tokens has the fingerprint it always had. The fingerprint is the first 12 hex digits
of SHA-256 of the UTF-8 bytes (lone surrogates are kept with `surrogatepass`, never an error). The
hash has no salt and no seed: the same prompt has the same version on every replica and after
every restart. The masks run on the client path: they search only the text near a digit, `#` or
`@` (every token holds one), no pattern backtracks over a long run, and they stop at
`MASK_MAX_CHARS`.

`extract_system_prompt` reads the system prompt of each wire format; `system_prompt_diff` shows
what changed between two versions, bounded in size.
"""

from __future__ import annotations

import difflib
import functools
import hashlib
import re
import unicodedata
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

MATCH_MAX_CHARS = 16_384
"""`match_prompt` regexes look at this many leading characters of the system prompt."""
MASK_MAX_CHARS = 32_768
"""The built-in masks apply to this many leading characters of the system prompt (the rest is
fingerprinted as it is): each request's prompt is masked on the client path."""
NORMALIZE_MAX_CHARS = 262_144
"""`fingerprint` normalises this many leading characters of the system prompt (NFC, the rule's
`fingerprint_ignore`, whitespace); the rest is hashed as it is."""
DIFF_MAX_LINES = 2_000
"""`system_prompt_diff` compares at most this many lines of each prompt."""
DIFF_MAX_CHARS = 20_000
"""`system_prompt_diff` output is cut to this many characters."""

FINGERPRINT_PREFIX = "fp-"
"""What a fingerprint version starts with (`fp-` and 12 hex digits)."""

_SPACE = re.compile(r"\s+")
_HEADER_VERSION = re.compile(rb"[A-Za-z0-9._:-]{1,64}")

IGNORED = "<ignored>"
"""What each match of a rule's `fingerprint_ignore` pattern becomes before fingerprinting."""

_MONTH = (
    r"(?:Jan(?:uary)?|Feb(?:ruary)?|Mar(?:ch)?|Apr(?:il)?|May|June?|July?|Aug(?:ust)?"
    r"|Sep(?:t(?:ember)?)?|Oct(?:ober)?|Nov(?:ember)?|Dec(?:ember)?)\.?"
)
_WEEKDAY = r"(?:Mon|Tue(?:s)?|Wed(?:nes)?|Thu(?:rs?)?|Fri|Sat(?:ur)?|Sun)(?:day)?\.?,?"
_ORDINAL = r"(?:st|nd|rd|th)?"
_CLOCK = r"\d{1,2}:\d{2}(?::\d{2}(?:[.,]\d{1,9})?)?"
_AMPM_TZ = (
    r"(?:\s?(?:[AaPp][Mm]|[AaPp]\.[Mm]\.)(?![A-Za-z]))?"
    r"(?:\s?(?:Z|UTC|GMT|[+-]\d{2}:?\d{2})(?![A-Za-z]))?"
)
_DAY_MONTH = (
    rf"(?:{_MONTH}\s{{1,4}}\d{{1,2}}{_ORDINAL}"
    rf"|\d{{1,2}}{_ORDINAL}\s{{1,4}}(?:of\s{{1,4}})?{_MONTH})"
)
_DATE = (
    r"(?:(?<!\d)(?:\d{4}-\d{2}-\d{2}|\d{4}/\d{1,2}/\d{1,2}|\d{1,2}/\d{1,2}/(?:\d{4}|\d{2})"
    r"|\d{1,2}[.-]\d{1,2}[.-]\d{4})(?!\d)"
    rf"|\b(?:{_WEEKDAY}\s{{1,4}})?{_DAY_MONTH},?\s{{1,4}}\d{{4}}(?!\d)"
    rf"|\b{_WEEKDAY}\s{{1,4}}{_DAY_MONTH}(?![\w])"
    r")"
    rf"(?:(?:T|,?\s{{1,4}}(?:at\s{{1,4}})?){_CLOCK}{_AMPM_TZ}(?![\d:]))?"
)
_EMAIL = re.compile(
    r"(?<![\w.%+-])[\w.%+-]{1,64}@(?:[A-Za-z0-9-]{1,63}\.){1,8}[A-Za-z]{2,24}(?![\w-])"
)
# The lookahead names every character a mask can start with, so that the engine skips the rest
# of the prompt at C speed instead of trying each alternative at every position.
_MASKS = re.compile(
    r"(?=[0-9#A-Za-fcltn])(?:"
    + "|".join(
        (
            r"(?P<uuid>(?<![0-9A-Za-z])[0-9A-Fa-f]{8}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{4}-"
            r"[0-9A-Fa-f]{4}-[0-9A-Fa-f]{12}(?![0-9A-Za-z]))",
            rf"(?P<date>{_DATE})",
            rf"(?P<time>(?<![\d:.])\d{{1,2}}:\d{{2}}:\d{{2}}(?:[.,]\d{{1,9}})?{_AMPM_TZ}(?![\d:]))",
            r"(?P<cue>(?i:\b(?:(?:current|local)\s{1,4}time|time\s{1,4}(?:is|now)|now)\b)"
            r"[^\w\n]{0,4}(?:(?:is|at)\s{1,4})?)"
            rf"(?P<cued_time>(?<![\d:.])\d{{1,2}}:\d{{2}}{_AMPM_TZ}(?![\d:]))",
            r"(?P<hex>(?<![0-9A-Za-z])(?=\d*[A-Fa-f])[0-9A-Fa-f]{16,}(?![0-9A-Za-z]))",
            r"(?P<ticket>(?<![\w#])#\d{4,}(?!\d)|\b[A-Z][A-Z0-9]{1,15}-\d{3,}(?!\d))",
            r"(?P<number>(?<![\d.,])\d{6,}(?!\d))",
        )
    )
    + ")"
)
_PLACEHOLDERS = {
    "uuid": "<uuid>",
    "date": "<date>",
    "time": "<time>",
    "cued_time": "<time>",
    "hex": "<hex>",
    "ticket": "<ticket>",
    "number": "<number>",
}


def _placeholder(match: re.Match[str]) -> str:
    kind = match.lastgroup or ""
    if kind == "cued_time":
        return match.group("cue") + "<time>"
    return _PLACEHOLDERS[kind]


def mask_tokens(text: str) -> str:
    """`text` with the per-request tokens of a templated prompt (e-mail addresses, UUIDs, dates
    and their times, times with seconds or after a cue like `now`, hex ids of 16 or more digits,
    ticket ids, runs of 6 or more digits) replaced by placeholders (`<date>`, ...), in its first
    `MASK_MAX_CHARS` characters. Short numbers, decimals, versions and plain clock times are kept:
    they are what rules are made of."""
    head, tail = text[:MASK_MAX_CHARS], text[MASK_MAX_CHARS:]
    parts: list[str] = []
    done = 0
    for start, end in _windows(head):
        window = head[start:end]
        if "@" in window:
            window = _EMAIL.sub("<email>", window)
        parts += (head[done:start], _MASKS.sub(_placeholder, window))
        done = end
    parts.append(head[done:])
    return "".join(parts) + tail


_ANCHOR = re.compile(r"[0-9#@]+")
_REACH = 48
"""Characters each side of a digit, `#` or `@` that a token may span (the longest is a date such
as `Wednesday, September 30th, 2026`: 21 characters before its first digit)."""


def _windows(text: str) -> Iterable[tuple[int, int]]:
    """The spans of `text` the masks need to search: every token holds a digit, `#` or `@`, so
    only the text within `_REACH` of one, widened to whitespace on both sides (the masks' edges
    see there what they would see in the whole text), and merged where they touch. Prose with a
    few numbers is searched in a few short spans instead of everywhere."""
    size = len(text)
    current: tuple[int, int] | None = None
    at = 0
    while (anchor := _ANCHOR.search(text, at)) is not None:
        begin = max(0, anchor.start() - _REACH)
        reach = anchor.end() + _REACH
        space = _SPACE.search(text, reach) if reach < size else None
        end = space.start() if space is not None else size
        if current is not None and begin <= current[1]:
            current = (current[0], max(current[1], end))
        else:
            if current is not None:
                yield current
            while begin > 0 and not text[begin - 1].isspace():
                begin -= 1  # at most back to the previous span: linear in all
            current = (begin, end)
        # An anchor further than _REACH before the span's end cannot widen it: skip those.
        at = max(anchor.end(), current[1] - _REACH)
    if current is not None:
        yield current


def normalize_prompt(system_prompt: str, ignore: Sequence[re.Pattern[str]] = ()) -> str:
    """The form that is fingerprinted (see the module docstring); `ignore` are the rule's
    `fingerprint_ignore` patterns, compiled."""
    text = unicodedata.normalize("NFC", system_prompt)
    for pattern in ignore:
        text = pattern.sub(IGNORED, text)
    return _SPACE.sub(" ", mask_tokens(text)).strip()


def fingerprint(system_prompt: str, ignore: Sequence[re.Pattern[str]] = ()) -> str:
    """12 hex digits identifying the normalised system prompt. The last few hundred distinct
    prompts are remembered: a route's static prompt is masked and hashed once, not per request."""
    return _fingerprint(system_prompt, tuple(ignore))


@functools.lru_cache(maxsize=512)
def _fingerprint(system_prompt: str, ignore: tuple[re.Pattern[str], ...]) -> str:
    head = system_prompt[:NORMALIZE_MAX_CHARS]
    digest = hashlib.sha256(normalize_prompt(head, ignore).encode("utf-8", "surrogatepass"))
    if len(system_prompt) > NORMALIZE_MAX_CHARS:
        digest.update(system_prompt[NORMALIZE_MAX_CHARS:].encode("utf-8", "surrogatepass"))
    return digest.hexdigest()[:12]


VersionPattern = str | re.Pattern[str] | None
"""A version's `match_prompt`: source, compiled, or None for a version found only by header."""


def match_version(system_prompt: str, versions: Mapping[str, VersionPattern]) -> str | None:
    """The first version (in mapping order) whose pattern is found in the system prompt's first
    `MATCH_MAX_CHARS` characters; None when none is. Pass compiled patterns on the hot path."""
    head = system_prompt[:MATCH_MAX_CHARS]
    for name, pattern in versions.items():
        if pattern is None:
            continue
        # A source string goes through re's cache; the gateway passes compiled patterns.
        compiled = re.compile(pattern) if isinstance(pattern, str) else pattern
        if compiled.search(head):
            return name
    return None


VersionSource = Literal["header", "match_prompt", "fingerprint"]


@dataclass(frozen=True, slots=True)
class ResolvedVersion:
    """A request's rule version and how it was found."""

    version: str
    """The version name (`v2`), the header's value, or `fp-` and the prompt's fingerprint."""
    source: VersionSource
    """header, match_prompt or fingerprint."""


def resolve_version(
    rule_version_setting: str,
    headers: Iterable[tuple[bytes, bytes]],
    system_prompt: str,
    versions: Mapping[str, VersionPattern],
    ignore: Sequence[re.Pattern[str]] = (),
    fingerprint_of: Callable[[str], str] | None = None,
) -> ResolvedVersion | None:
    """The version of one request under one rule set; None when the request has no system
    prompt (nothing but whitespace), whatever its headers say. `rule_version_setting` is the
    rule's `version` (`fingerprint` or `header:<name>`); `headers` are the request's header lines
    as ASGI and HTTP/1.1 carry them, `(name, value)` bytes, names in any case; `ignore` are the
    rule's `fingerprint_ignore` patterns, compiled; `fingerprint_of`, when given, computes the
    fingerprint instead (the gateway's templates split the prompt anyway, and know it)."""
    if not system_prompt or system_prompt.isspace():
        return None
    wanted = _version_header(rule_version_setting)
    if wanted is not None:
        size = len(wanted)
        for key, raw in headers:
            # Names arrive in lower case from ASGI servers: compare first, lower only if needed.
            if len(key) == size and (key == wanted or key.lower() == wanted):
                value = raw.strip()  # ASCII whitespace only: HTTP's, never part of a name
                if _HEADER_VERSION.fullmatch(value):
                    return ResolvedVersion(value.decode("ascii"), "header")
                break
    matched = match_version(system_prompt, versions)
    if matched is not None:
        return ResolvedVersion(matched, "match_prompt")
    found = fingerprint_of(system_prompt) if fingerprint_of is not None else None
    if found is None:
        found = fingerprint(system_prompt, ignore)
    return ResolvedVersion(FINGERPRINT_PREFIX + found, "fingerprint")


@functools.lru_cache(maxsize=256)
def _version_header(rule_version_setting: str) -> bytes | None:
    """The lower-case header name of a `header:<name>` setting; None for `fingerprint`. Cached:
    a rule's setting is read on every request of its routes."""
    if not rule_version_setting.startswith("header:"):
        return None
    return rule_version_setting.removeprefix("header:").lower().encode("latin-1")


def extract_system_prompt(endpoint: str, body: Mapping[str, Any]) -> str:
    """The system prompt of a request body, for the record's endpoint name:

    - `chat.completions`: every `system` and `developer` message, in order;
    - `responses`: `instructions`, then every `system` and `developer` item of `input`;
    - `messages` (Anthropic): the top-level `system`;
    - anything else (`completions`, `embeddings`): none.

    Content may be a string or a list of parts; the text of `text`/`input_text` parts is kept,
    other parts (images, files) are skipped. Parts join with a newline, messages with a blank
    line. A malformed body yields what could be read (often ""); this never raises.
    """
    if not isinstance(body, Mapping):
        return ""
    texts: list[str] = []
    if endpoint == "chat.completions":
        texts.extend(_role_texts(body.get("messages")))
    elif endpoint == "responses":
        texts.append(_content_text(body.get("instructions")))
        texts.extend(_role_texts(body.get("input")))
    elif endpoint == "messages":
        texts.append(_content_text(body.get("system")))
    return "\n\n".join(text for text in texts if text)


def _role_texts(messages: Any) -> Iterable[str]:
    if not isinstance(messages, list):
        return
    for message in messages:
        if isinstance(message, Mapping) and message.get("role") in ("system", "developer"):
            yield _content_text(message.get("content"))


def _content_text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        return ""
    parts = []
    for part in content:
        if isinstance(part, str):
            parts.append(part)
        elif (
            isinstance(part, Mapping)
            and part.get("type", "text") in ("text", "input_text")
            and isinstance(part.get("text"), str)
        ):
            parts.append(part["text"])
    return "\n".join(parts)


def system_prompt_diff(old: str, new: str) -> str:
    """A unified diff from `old` to `new` (`previous` → `current`), over at most
    `DIFF_MAX_LINES` lines of each and cut to about `DIFF_MAX_CHARS` characters with a closing
    note. "" when the prompts are equal."""
    if old == new:
        return ""
    old_lines, new_lines = old.splitlines(), new.splitlines()
    note = ""
    if len(old_lines) > DIFF_MAX_LINES or len(new_lines) > DIFF_MAX_LINES:
        note = f"… (compared the first {DIFF_MAX_LINES} lines only)\n"
        old_lines, new_lines = old_lines[:DIFF_MAX_LINES], new_lines[:DIFF_MAX_LINES]
    lines = difflib.unified_diff(old_lines, new_lines, "previous", "current", lineterm="")
    out: list[str] = []
    size = 0
    for line in lines:
        if size + len(line) + 1 > DIFF_MAX_CHARS:
            out.append(line[: max(0, DIFF_MAX_CHARS - size)])
            out.append(f"… (diff cut at {DIFF_MAX_CHARS} characters)")
            break
        out.append(line)
        size += len(line) + 1
    text = "\n".join(out) + "\n" if out else ""
    if not text:  # only whitespace at line ends differs: splitlines made them equal
        text = "(the prompts differ only in line endings)\n"
    # Stored and shown as UTF-8: escape lone surrogates rather than fail there.
    return (text + note).encode("utf-8", "backslashreplace").decode("utf-8")
