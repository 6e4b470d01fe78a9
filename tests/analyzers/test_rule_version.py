"""Rule versions: by header, by match_prompt, by fingerprint; system prompts of every wire
format; bounded prompt diffs."""

from __future__ import annotations

import re
from typing import Any

import pytest

from analyzers.rule_version import (
    DIFF_MAX_CHARS,
    MATCH_MAX_CHARS,
    ResolvedVersion,
    extract_system_prompt,
    fingerprint,
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
    assert resolve_version("fingerprint", [], "", {}).version == "fp-e3b0c44298fc"
    assert resolve_version("fingerprint", [], V1, {}).version == "fp-d344d5cc36e5"
    assert resolve_version("header:x-rule-version", [], f"  {V1}\n", {}).version == (
        "fp-d344d5cc36e5"
    )


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
