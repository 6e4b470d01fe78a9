"""Rule versions: by header, by match_prompt, by fingerprint (with the per-request tokens of a
templated prompt masked); none without a system prompt; system prompts of every wire format;
bounded prompt diffs."""

from __future__ import annotations

import re
from typing import Any

import pytest

from analyzers.rule_version import (
    DIFF_MAX_CHARS,
    MASK_MAX_CHARS,
    MATCH_MAX_CHARS,
    NORMALIZE_MAX_CHARS,
    ResolvedVersion,
    extract_system_prompt,
    fingerprint,
    mask_tokens,
    match_version,
    resolve_version,
    system_prompt_diff,
)

V1 = "You are the support bot of a parcel company.\nRules: max_weight = 100 kg."
V2 = "You are the support bot of a parcel company.\nRules: max_weight = 150 kg."
VERSIONS = {"v1": r"max_weight\s*=\s*100", "v2": r"max_weight\s*=\s*150"}


def test_fingerprint_ignores_whitespace_but_not_case() -> None:
    assert re.fullmatch(r"[0-9a-f]{12}", fingerprint(V1))
    assert fingerprint(V1) == fingerprint("  You are the support bot of a parcel company. Rules:\t"
                                          "max_weight  =\n100 kg.\n")  # fmt: skip
    assert fingerprint(V1) != fingerprint(V2)
    assert fingerprint(V1) != fingerprint(V1.upper())
    assert fingerprint("caf\u00e9") == fingerprint("cafe\u0301")  # NFC: one way to write é
    assert fingerprint("") == "e3b0c44298fc"


def test_fingerprint_of_a_prompt_with_a_lone_surrogate_does_not_crash() -> None:
    assert fingerprint("rules \udc80") != fingerprint("rules")


def test_match_version_takes_the_first_match_in_config_order() -> None:
    assert match_version(V1, VERSIONS) == "v1"
    assert match_version(V2, VERSIONS) == "v2"
    assert match_version("no rules here", VERSIONS) is None
    both = {"broad": r"max_weight", "v2": r"max_weight\s*=\s*150"}
    assert match_version(V2, both) == "broad"
    compiled = {"manual": None, "v2": re.compile(r"150 kg")}
    assert match_version(V2, compiled) == "v2"


@pytest.mark.parametrize(
    ("setting", "headers", "prompt", "expected"),
    [
        ("header:x-rule-version", [(b"X-Rule-Version", b" v7 ")], V1,
         ResolvedVersion("v7", "header")),
        ("header:x-rule-version", [], V2, ResolvedVersion("v2", "match_prompt")),
        ("header:x-rule-version", [(b"x-rule-version", b"v 7; drop")], V2,
         ResolvedVersion("v2", "match_prompt")),
        ("header:x-rule-version", [(b"x-rule-version", b"x" * 65)], V2,
         ResolvedVersion("v2", "match_prompt")),
        ("fingerprint", [(b"x-rule-version", b"v7")], V1, ResolvedVersion("v1", "match_prompt")),
        ("fingerprint", [], "Other prompt",
         ResolvedVersion("fp-" + fingerprint("Other prompt"), "fingerprint")),
    ],
    ids=["header", "no-header", "bad-header", "long-header", "header-unused", "fingerprint"],
)  # fmt: skip
def test_resolve_version_tries_header_then_match_prompt_then_fingerprint(
    setting: str, headers: list[tuple[bytes, bytes]], prompt: str, expected: ResolvedVersion
) -> None:
    assert resolve_version(setting, headers, prompt, VERSIONS) == expected


def test_a_prompt_edit_is_a_new_version_with_no_configuration() -> None:
    first = resolve_version("fingerprint", [], V1, {})
    second = resolve_version("fingerprint", [], V1 + " Be brief.", {})
    assert first.source == second.source == "fingerprint"
    assert first.version != second.version


def test_a_fingerprint_version_is_fp_and_12_hex_the_same_on_every_run() -> None:
    # The form stores already hold (`fp-<12 hex>`): these literals must never change, or every
    # prompt would look like a rule change after an upgrade.
    # A prompt with no per-request token keeps its fingerprint through the masks.
    assert fingerprint("") == "e3b0c44298fc"
    assert fingerprint(V1) == "d344d5cc36e5"
    assert resolve_version("fingerprint", [], V1, {}) == ResolvedVersion(
        "fp-d344d5cc36e5", "fingerprint"
    )
    assert resolve_version("header:x-rule-version", [], f"  {V1}\n", {}) == ResolvedVersion(
        "fp-d344d5cc36e5", "fingerprint"
    )


@pytest.mark.parametrize("prompt", ["", " ", "\n\t "], ids=["empty", "space", "whitespace"])
def test_a_request_without_a_system_prompt_has_no_version_whatever_its_headers(
    prompt: str,
) -> None:
    # An embeddings call or a health probe is not a rule version of its own.
    assert resolve_version("fingerprint", [], prompt, VERSIONS) is None
    header = [(b"x-rule-version", b"v7")]
    assert resolve_version("header:x-rule-version", header, prompt, VERSIONS) is None


TEMPLATE = (
    "You are the support bot of a parcel company. Rules: max_weight = {limit} kg, "
    "at most 3 parcels per order.\n"
    "Customer: {name} <{email}>. Today is {date}. The current time is {time}.\n"
    "Request id {uuid}, trace {trace}. Ticket {ticket}, order {order}."
)
FILLS = [
    {"name": "Ada Lovelace", "email": "ada@example.com", "date": "2026-12-01",
     "time": "23:05", "uuid": "3f2b1c4e-9a7d-4e21-b3c0-0123456789ab",
     "trace": "9f86d081884c7d659a2feaa0c55ad015", "ticket": "#48213", "order": "1002938"},
    {"name": "Grace Hopper", "email": "grace.h+ops@mail.example.org",
     "date": "Tuesday, December 1, 2026", "time": "11:05 PM",
     "uuid": "A1B2C3D4-0000-4E21-B3C0-FFFFFFFFFFFF", "trace": "00f0e1d2c3b4a5968778695a4b3c2d1e",
     "ticket": "SUP-20931", "order": "998877665544"},
    {"name": "Alan Turing", "email": "alan@turing.co.uk", "date": "01/12/2026",
     "time": "23:05:59", "uuid": "00000000-0000-4000-8000-000000000001",
     "trace": "deadbeef00000000deadbeef00000000", "ticket": "TICKET-1234", "order": "424242"},
    {"name": "Edsger Dijkstra", "email": "ewd@cs.example.edu", "date": "1 Dec 2026",
     "time": "7:05 am", "uuid": "ffffffff-ffff-4fff-bfff-ffffffffffff",
     "trace": "0123456789abcdef0123456789abcdef", "ticket": "#1000001", "order": "31415926"},
]  # fmt: skip
NAME = re.compile(r"(?<=Customer: )[^<\n]*")


def test_a_templated_prompt_is_one_version_whoever_and_whenever_it_is_for() -> None:
    prompts = [TEMPLATE.format(limit=100, **fill) for fill in FILLS]
    versions = {resolve_version("fingerprint", [], p, {}, [NAME]) for p in prompts}
    assert versions == {ResolvedVersion("fp-" + fingerprint(prompts[0], [NAME]), "fingerprint")}
    # The customer's name is not a token the masks know: without the rule's pattern each
    # customer is a version of their own; everything else on the line is masked.
    assert len({fingerprint(p) for p in prompts}) == len(prompts)
    same_name = [TEMPLATE.format(limit=100, **{**fill, "name": "Ada"}) for fill in FILLS]
    assert len({fingerprint(p) for p in same_name}) == 1


def test_a_rule_parameter_changes_the_version_of_a_templated_prompt() -> None:
    fill = FILLS[0]
    old = fingerprint(TEMPLATE.format(limit=100, **fill), [NAME])
    assert fingerprint(TEMPLATE.format(limit=150, **fill), [NAME]) != old
    assert fingerprint(TEMPLATE.format(limit=100, **fill).replace("at most 3", "at most 4")) != (
        fingerprint(TEMPLATE.format(limit=100, **fill))
    )
    # ... also when the template is filled differently on each side.
    assert fingerprint(TEMPLATE.format(limit=150, **FILLS[1]), [NAME]) != old


@pytest.mark.parametrize(
    ("text", "masked"),
    [
        ("Today is 2026-12-01.", "Today is <date>."),
        ("at 2026-12-01T23:05:07.123+01:00 sharp", "at <date> sharp"),
        ("on 2026-12-01 23:05 UTC", "on <date>"),
        ("Tuesday, December 1, 2026 at 11:05 PM", "<date>"),
        ("Tue, 1 Dec 2026", "<date>"),
        ("the 1st of December, 2026", "the <date>"),
        ("Tuesday, December 1", "<date>"),
        ("01/12/2026, 12/1/26, 2026/12/01, 1.12.2026, 01-12-2026",
         "<date>, <date>, <date>, <date>, <date>"),
        ("logged 23:05:07.5", "logged <time>"),
        ("The current time is 14:32.", "The current time is <time>."),
        ("It is now 2:32 PM.", "It is now <time>."),
        ("Local time: 09:15", "Local time: <time>"),
        ("mail bob.smith+x@example.co.uk now", "mail <email> now"),
        ("id 3f2b1c4e-9a7d-4e21-b3c0-0123456789ab", "id <uuid>"),
        ("trace 9f86d081884c7d65", "trace <hex>"),
        ("ticket #12345 and TICKET-1234 and ABC-987", "ticket <ticket> and <ticket> and <ticket>"),
        ("order 123456, account 12345678901", "order <number>, account <number>"),
        ("user_1234567", "user_<number>"),
    ],
)  # fmt: skip
def test_the_masks_replace_per_request_tokens(text: str, masked: str) -> None:
    assert mask_tokens(text) == masked


@pytest.mark.parametrize(
    "text",
    [
        "max_weight = 100", "max_weight = 150", "max_weight=150kg", "limit 10000 tokens",
        "refunds up to 1,000,000 cents", "pi is 3.1415926535", "version v1.2.10", "GPT-4o",
        "COVID-19", "open 9:00-17:00, closed on Sundays", "Returns until December 31",
        "issue #12", "deadline May 5", "ratio 3/4", "colour #ff8800", "hash deadbeef",
        "item 12-5", "TICKET-12",
    ],
)  # fmt: skip
def test_the_masks_keep_what_rules_are_made_of(text: str) -> None:
    assert mask_tokens(text) == text


def test_tokens_far_apart_in_long_prose_are_masked_and_their_neighbours_kept() -> None:
    # The masks search near digits, `#` and `@` only: what lies at the edges of those stretches
    # must be judged as in the whole text.
    prose = "Be precise and kind to every customer, whatever they ask. " * 20
    text = (
        prose + "Today is Wednesday, September 30th, 2026." + prose + "Mail ada@example.com. "
        + prose + "x" * 100 + "#12345 and " + "y" * 80 + "1234567 then 12:30:00" + prose
    )  # fmt: skip
    assert mask_tokens(text) == (
        prose + "Today is <date>." + prose + "Mail <email>. "
        + prose + "x" * 100 + "#12345 and " + "y" * 80 + "<number> then <time>" + prose
    )  # fmt: skip


def test_fingerprint_ignore_patterns_apply_before_whitespace_is_collapsed() -> None:
    # A pattern may rely on line ends: they are still there when it runs.
    name_line = re.compile(r"(?m)^Customer: .*$")
    one = "Be kind.\nCustomer: Ada\nmax_weight = 100"
    other = "Be kind.\nCustomer: Grace Hopper\nmax_weight = 100"
    assert fingerprint(one) != fingerprint(other)
    assert fingerprint(one, [name_line]) == fingerprint(other, [name_line])
    assert fingerprint(one, [name_line]) != fingerprint(one.replace("100", "150"), [name_line])


def test_a_prompt_beyond_normalize_max_chars_is_normalised_in_its_head_and_hashed_whole() -> None:
    head = "Be kind.  Ship   today. " * (NORMALIZE_MAX_CHARS // 24 + 1)
    short = head[: NORMALIZE_MAX_CHARS - 100]
    assert fingerprint(short) == fingerprint(" ".join(short.split()))  # as it always was
    long = head + "max_weight = 150. " * 1000
    assert len(long) > NORMALIZE_MAX_CHARS
    assert fingerprint(long) == fingerprint(str(long))  # the same prompt, the same version
    assert fingerprint(long) != fingerprint(long.replace("150", "151"))  # a tail edit counts
    assert fingerprint(long) != fingerprint(long.replace("150. ", "150.  "))  # hashed as it is


def test_the_masks_stop_at_mask_max_chars_and_stay_linear_on_long_runs() -> None:
    filler = "x" * (MASK_MAX_CHARS - 20)
    inside = filler + " on 2026-12-01"
    assert fingerprint(inside) == fingerprint(filler + " on 2026-12-02")
    beyond = "x" * MASK_MAX_CHARS + " on 2026-12-01"
    assert fingerprint(beyond) != fingerprint("x" * MASK_MAX_CHARS + " on 2026-12-02")
    # Runs that would make a backtracking pattern quadratic: these return (a test timeout
    # would catch a regression), with the tokens inside them masked as runs of their own.
    for run in ("a" * 1_000_000, "1" * 1_000_000, "x@" * 500_000, "a1-" * 300_000):
        assert len(fingerprint(run)) == 12
    assert mask_tokens("9" * 1000) == "<number>"


def test_match_prompt_looks_only_at_the_first_16k_characters() -> None:
    assert MATCH_MAX_CHARS == 16_384
    inside = "x" * (MATCH_MAX_CHARS - 20) + "max_weight = 150"
    beyond = "x" * MATCH_MAX_CHARS + "max_weight = 150"
    assert match_version(inside, VERSIONS) == "v2"
    assert match_version(beyond, VERSIONS) is None
    assert resolve_version("fingerprint", [], beyond, VERSIONS) == ResolvedVersion(
        "fp-" + fingerprint(beyond), "fingerprint"
    )


@pytest.mark.parametrize(
    ("value", "expected"),
    [(b"\tv7 ", "v7"), (b"v7\xa0", None), (b"caf\xe9", None), (b"", None)],
    ids=["ascii-whitespace-trimmed", "nbsp-is-not-whitespace", "latin-1", "empty"],
)
def test_a_header_version_is_plain_ascii_trimmed_of_http_whitespace(
    value: bytes, expected: str | None
) -> None:
    resolved = resolve_version("header:x-rule-version", [(b"x-rule-version", value)], V2, VERSIONS)
    assert resolved == (
        ResolvedVersion(expected, "header")
        if expected is not None
        else ResolvedVersion("v2", "match_prompt")
    )


def test_only_the_first_version_header_counts() -> None:
    headers = [(b"x-rule-version", b"bad value"), (b"x-rule-version", b"v9")]
    assert resolve_version("header:X-Rule-Version", headers, V1, VERSIONS) == ResolvedVersion(
        "v1", "match_prompt"
    )


BODIES: list[tuple[str, Any, str]] = [
    ("chat.completions",
     {"messages": [
         {"role": "system", "content": "A"},
         {"role": "user", "content": "ignored"},
         {"role": "developer", "content": [
             {"type": "text", "text": "B"},
             {"type": "image_url", "image_url": {"url": "data:,"}},
             {"type": "text", "text": "C"}]},
     ]},
     "A\n\nB\nC"),
    ("responses",
     {"instructions": "A", "input": [
         {"type": "message", "role": "system", "content": [{"type": "input_text", "text": "B"}]},
         {"role": "user", "content": "ignored"}]},
     "A\n\nB"),
    ("responses", {"instructions": "A", "input": "just a question"}, "A"),
    ("messages", {"system": "A", "messages": [{"role": "user", "content": "ignored"}]}, "A"),
    ("messages",
     {"system": [{"type": "text", "text": "A", "cache_control": {"type": "ephemeral"}},
                 {"type": "text", "text": "B"}]},
     "A\nB"),
    ("completions", {"prompt": "not a system prompt"}, ""),
    ("embeddings", {"input": "x"}, ""),
    ("chat.completions", {"messages": "not a list"}, ""),
    ("chat.completions", {"messages": [{"role": "system", "content": 42}, "junk"]}, ""),
    ("messages", {"system": [{"type": "text", "text": 5}, None]}, ""),
    ("chat.completions", ["not", "a", "mapping"], ""),
]  # fmt: skip


@pytest.mark.parametrize(("endpoint", "body", "expected"), BODIES)
def test_extract_system_prompt(endpoint: str, body: Any, expected: str) -> None:
    assert extract_system_prompt(endpoint, body) == expected


def test_system_prompt_diff_shows_the_rule_change() -> None:
    diff = system_prompt_diff(V1, V2)
    assert diff.splitlines() == [
        "--- previous",
        "+++ current",
        "@@ -1,2 +1,2 @@",
        " You are the support bot of a parcel company.",
        "-Rules: max_weight = 100 kg.",
        "+Rules: max_weight = 150 kg.",
    ]
    assert system_prompt_diff(V1, V1) == ""
    assert system_prompt_diff("a\n", "a") == "(the prompts differ only in line endings)\n"


def test_system_prompt_diff_is_bounded() -> None:
    old = "\n".join(f"rule {i}" for i in range(100_000))
    new = "\n".join(f"rule {i} (revised)" for i in range(100_000))
    diff = system_prompt_diff(old, new)
    assert len(diff) < DIFF_MAX_CHARS + 200
    assert "diff cut at" in diff
    assert "compared the first 2000 lines only" in diff
    one_line = system_prompt_diff("x" * 1_000_000, "y" * 1_000_000)
    assert len(one_line) < DIFF_MAX_CHARS + 200
    system_prompt_diff("rule \udc80", "rule").encode("utf-8")  # storable as UTF-8
