"""Redaction: what is masked, what is left alone, and that hostile 10 MB bodies finish."""

from __future__ import annotations

import json
from collections.abc import Callable

import pytest

from proxy.store.redaction import redact

OPENAI = "sk-proj-AbCdEfGhIjKlMnOpQrStUvWxYz_0123456789-abc"
ANTHROPIC = "sk-ant-api03-AbCdEfGhIjKlMnOpQrStUvWxYz0123456789-_xyz"
GITHUB = "ghp_" + "A1b2C3d4E5" * 4  # 40 characters after the prefix
AWS = "AKIAIOSFODNN7EXAMPLE"
TEN_MB = 10 * 1024 * 1024


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (f"key={OPENAI};", "key=[REDACTED:openai_key];"),
        ("old style sk-" + "a" * 48, "old style [REDACTED:openai_key]"),
        (f"x-api-key: {ANTHROPIC}", "x-api-key: [REDACTED:anthropic_key]"),
        (f"token {GITHUB} end", "token [REDACTED:github_token] end"),
        ("github_pat_" + "a1_B" * 20, "[REDACTED:github_token]"),
        (f"aws {AWS}.", "aws [REDACTED:aws_key]."),
        (
            "Authorization: Bearer eyJhbGciOi.JIUzI1NiJ9-abc_def",
            "Authorization: Bearer [REDACTED:bearer_token]",
        ),
        (
            "authorization: bearer abcdefghijklmnopqrstu",
            "authorization: bearer [REDACTED:bearer_token]",
        ),
        ("write to jane.doe+llm@mail.example.co.uk.", "write to [REDACTED:email]."),
        ("<ops@example.com>, dev@example.org", "<[REDACTED:email]>, [REDACTED:email]"),
    ],
)
def test_masks_each_kind(text: str, expected: str) -> None:
    assert redact(text) == expected


def test_masks_secret_json_fields_and_keeps_the_json_valid() -> None:
    body = json.dumps(
        {
            "api_key": 'has "quotes" and \\ backslashes',
            "Password": "hunter2",
            "access_token": "t",
            "model": "gpt-4o",
            "messages": [{"role": "user", "content": "hello"}],
        }
    )
    out = json.loads(redact(body))
    assert out["api_key"] == out["Password"] == out["access_token"] == "[REDACTED:secret_field]"
    assert out["model"] == "gpt-4o"
    assert out["messages"] == [{"role": "user", "content": "hello"}]


def test_a_secret_inside_a_secret_field_is_masked_once() -> None:
    body = json.dumps({"authorization": f"Bearer {OPENAI}"})
    assert redact(body) == '{"authorization": "[REDACTED:secret_field]"}'


@pytest.mark.parametrize(
    "text",
    [
        "sk-short",
        "task-abcdefghijklmnopqrstuvwxyz0123",  # `sk-` inside a word is not a key
        "Bearer of bad news",
        "XAKIAIOSFODNN7EXAMPLE",
        "AKIAIOSFODNN7EXAMPLEX",
        "ghp_tooshort",
        "user@localhost",
        "@mention and a.b.c",
        '{"tokens": 12, "token": 5}',
        "plain text with no secrets, 100% safe.",
        "",
    ],
)
def test_leaves_lookalikes_alone(text: str) -> None:
    assert redact(text) == text


def test_masks_every_occurrence_in_a_realistic_body() -> None:
    message = f"my key is {OPENAI}, mail me at a@b.io or c@d.io; aws {AWS}"
    body = json.dumps({"model": "m", "messages": [{"role": "user", "content": message}]})
    out = redact(body)
    for secret in (OPENAI, AWS, "a@b.io", "c@d.io"):
        assert secret not in out
    assert out.count("[REDACTED:") == 4
    json.loads(out)  # still JSON


@pytest.mark.parametrize(
    ("name", "make"),
    [
        ("one long word", lambda: "a" * TEN_MB),
        ("sk- repeated", lambda: "sk-" * (TEN_MB // 3)),
        ("at signs between letters", lambda: "a@" * (TEN_MB // 2)),
        ("dotted run", lambda: "a." * (TEN_MB // 2)),
        ("unterminated secret field", lambda: '"api_key":"' + "\\" * TEN_MB),
        ("bearer repeated", lambda: "Bearer " * (TEN_MB // 7)),
        ("quotes", lambda: '"' * TEN_MB),
        ("quote-letter pairs", lambda: '"a' * (TEN_MB // 2)),
        ("AKIA repeated", lambda: "AKIA" * (TEN_MB // 4)),
        ("local part without domain", lambda: "a" * TEN_MB + "@"),
    ],
)
def test_hostile_10mb_inputs_finish_and_are_correct(name: str, make: Callable[[], str]) -> None:
    text = make()
    out = redact(text)
    if name == "sk- repeated":
        assert out == "[REDACTED:openai_key]"  # one run of key characters: one key
    else:
        assert out == text  # none of these contains anything to mask


def test_a_secret_at_the_end_of_10mb_is_found() -> None:
    text = "x " * (TEN_MB // 2) + f"{OPENAI} and {'b' * 70}@example.com"
    out = redact(text)
    assert out.endswith(f"[REDACTED:openai_key] and {'b' * 6}[REDACTED:email]")
    assert len(out) < len(text)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("g AIzaSyD3f9Gh2Jk5Lm8Np1Qr4St7Vw0Xy3Za6Bc.", "g [REDACTED:google_key]."),
        ("s xoxb-1234567890-0987654321-AbCdEf end", "s [REDACTED:slack_token] end"),
        ("s xapp-1-A0123456789-abcdef", "s [REDACTED:slack_token]"),
        (
            "https://hooks.slack.com/services/T0A/B0B/q1w2e3r4 ok",
            "https://hooks.slack.com/[REDACTED:slack_webhook] ok",
        ),
        ("pay sk_live_51HqLyjK9z8X7w6V5u4", "pay sk_[REDACTED:stripe_key]"),
        ("jwt eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxIn0.c2ln-_x", "jwt [REDACTED:jwt]"),
        ("db password=hunter2!x user", "db password=[REDACTED:secret_pair] user"),
        ("?api_key=abc123&x=1", "?api_key=[REDACTED:secret_pair]&x=1"),
        (
            "AWS_SECRET_ACCESS_KEY = wJalrXUtnFEMI/K7MDENG",
            "AWS_SECRET_ACCESS_KEY = [REDACTED:secret_pair]",
        ),
        (
            "-----BEGIN RSA PRIVATE KEY-----\nMIIE\n-----END RSA PRIVATE KEY----- after",
            "[REDACTED:private_key] after",
        ),
        ("-----BEGIN PRIVATE KEY-----\nMIIE cut off", "[REDACTED:private_key]"),
        ("to jörg.müller@example.de!", "to [REDACTED:email]!"),
        ("to info@bücher-café.de.", "to [REDACTED:email]."),
        ('"j\\u00f6rg@b\\u00fccher.de"', '"[REDACTED:email]"'),
        ('"line\\njane@example.com"', '"line\\n[REDACTED:email]"'),
    ],
)
def test_masks_the_other_token_formats(text: str, expected: str) -> None:
    assert redact(text) == expected


def test_masks_secret_fields_in_json_inside_json_strings() -> None:
    inner = json.dumps({"api_key": "level-one-secret", "keep": "visible"})
    deeper = json.dumps({"content": json.dumps({"wrapped": json.dumps({"password": "level2"})})})
    out = redact(json.dumps({"content": inner}))
    assert "level-one-secret" not in out and "visible" in out
    assert json.loads(json.loads(out)["content"])["api_key"] == "[REDACTED:secret_field]"
    assert "level2" not in redact(deeper)
    json.loads(redact(deeper))  # still JSON, at every level


@pytest.mark.parametrize(
    "text", ["monkey business", "key: 12", "x-ample.com", "exoxb-123", "AIzaShort", "eyJonly"]
)
def test_leaves_the_new_lookalikes_alone(text: str) -> None:
    assert redact(text) == text


def test_stored_text_follows_the_bodies_policy() -> None:
    from proxy.store.redaction import StoredText

    said = f"use {OPENAI}"
    assert StoredText("full").text(said) == StoredText("full").derived(said) == said
    assert StoredText("redacted").text(said) == "use [REDACTED:openai_key]"
    assert StoredText("redacted").derived(said) == "use [REDACTED:openai_key]"
    assert StoredText("none").text(said) == "use [REDACTED:openai_key]"
    assert StoredText("none").derived(said) is None
    with pytest.raises(ValueError):
        StoredText("some")  # type: ignore[arg-type]


def test_check_reasons_and_finding_details_follow_the_bodies_policy() -> None:
    from datetime import UTC, datetime

    from proxy.core import Arm, CheckRecord, FindingRecord
    from proxy.store.redaction import NOT_KEPT, apply_bodies_policy

    now = datetime.now(UTC)
    check = CheckRecord(
        request_id="r", route="bot", target="m", arm=Arm.PRIMARY, rule="x", rule_version="v1",
        check="note", result="fail", reason=f"$.note is '{OPENAI}'", created_at=now,
    )  # fmt: skip
    finding = FindingRecord(
        request_id="r", route="bot", target="m", arm=Arm.PRIMARY, analyzer="a", name="n",
        created_at=now, value=1.0, label=None, detail=f"saw {AWS}",
    )  # fmt: skip
    assert apply_bodies_policy(check, "full") is check
    assert apply_bodies_policy(check, "redacted").reason == "$.note is '[REDACTED:openai_key]'"
    assert apply_bodies_policy(check, "none").reason == NOT_KEPT
    assert apply_bodies_policy(finding, "redacted").detail == "saw [REDACTED:aws_key]"
    assert apply_bodies_policy(finding, "none").detail == NOT_KEPT


# Each pass runs only when the text holds characters and substrings all its matches hold (`_` and
# `g` for GitHub, `key"` or `token"` in the lower-cased text for a secret field): every variant must
# still be found, in any case, and what only looks like one left alone.
_FIELD_NAMES = (
    "api_key", "api-key", "apikey", "x-api-key", "secret", "secret_key", "secret-key", "secretkey",
    "client_secret", "client-secret", "clientsecret", "access_key", "accesskey",
    "aws_secret_access_key", "secret_access_key", "secretaccesskey", "password", "passwd",
    "token", "access_token", "refresh-token", "refreshtoken", "id_token", "auth_token",
    "authtoken", "authorization", "private_key", "privatekey",
)  # fmt: skip


@pytest.mark.parametrize("name", [*_FIELD_NAMES, *(n.upper() for n in _FIELD_NAMES), "Api_Key"])
def test_every_secret_field_name_is_masked_in_any_case(name: str) -> None:
    body = json.dumps({"model": "m", name: "s3cr3t-value", "max_tokens": 400})
    assert json.loads(redact(body))[name] == "[REDACTED:secret_field]"
    wrapped = json.dumps({"content": body})
    assert "s3cr3t-value" not in redact(wrapped)
    assert json.loads(json.loads(redact(wrapped))["content"])[name] == "[REDACTED:secret_field]"


@pytest.mark.parametrize(
    "body",
    [
        '{"max_tokens": "400", "tokens": "12", "keys": "a", "secrets": "b", "monkey": "c"}',
        '{"content": "{\\"tokens\\": \\"12\\", \\"keyring\\": \\"x\\"}"}',
        '{"token_count": "5", "password_hint": "first pet"}',
    ],
)
def test_fields_that_only_contain_a_secret_word_are_left_alone(body: str) -> None:
    assert redact(body) == body


_PAIR_NAMES = (
    "password", "passwd", "pwd", "secret", "api_key", "api-key", "apikey", "token",
    "secret_key", "access_key", "private_key", "client_secret", "access_token",
    "aws_secret_access_key",
)  # fmt: skip


@pytest.mark.parametrize("separator", ["=", " =", ":", " :"])
@pytest.mark.parametrize("name", [*_PAIR_NAMES, *(n.upper() for n in _PAIR_NAMES), "PassWd"])
def test_every_secret_pair_name_is_masked_in_any_case(name: str, separator: str) -> None:
    assert redact(f"set {name}{separator} hunter2x now") == (
        f"set {name}{separator} [REDACTED:secret_pair] now"
    )


@pytest.mark.parametrize(
    "text",
    ["tokens=12 keys: 3", "monkeys: 4", "passwords = many", "key_id=abc123", "the token is xyz"],
)
def test_pairs_that_only_contain_a_secret_word_are_left_alone(text: str) -> None:
    assert redact(text) == text


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        *((f"{p}_{'A1b2C3d4E5' * 4}", "[REDACTED:github_token]") for p in
          ("ghp", "gho", "ghu", "ghs", "ghr")),
        ("sk_test_51HqLyjK9z8X7w6V5u4", "sk_[REDACTED:stripe_key]"),
        ("rk_live_51HqLyjK9z8X7w6V5u4", "rk_[REDACTED:stripe_key]"),
        ("rk_test_51HqLyjK9z8X7w6V5u4", "rk_[REDACTED:stripe_key]"),
        ("ASIAIOSFODNN7EXAMPLE", "[REDACTED:aws_key]"),
        *((f"x{p}-1234567890-abc", "[REDACTED:slack_token]") for p in
          ("oxa", "oxb", "oxe", "oxo", "oxp", "oxr", "oxs", "app")),
    ],
)  # fmt: skip
def test_every_key_prefix_is_masked(text: str, expected: str) -> None:
    assert redact(f"see {text} here") == f"see {expected} here"


@pytest.mark.parametrize(
    "text",
    [
        "ghx_" + "A1b2C3d4E5" * 4,  # not a GitHub prefix
        "through the night, high and right: " + "A1b2C3d4E5" * 4,  # `gh` in prose
        "github_" + "a1_B" * 20,
        "sk_prod_51HqLyjK9z8X7w6V5u4",
        "AKIBIOSFODNN7EXAMPLE",
        "Asia AKIA",
        "xoxz-1234567890-abc",
        "xap-1234567890-abc",
        "box-office xo-1234567890",
    ],
)
def test_near_misses_of_key_prefixes_are_left_alone(text: str) -> None:
    assert redact(text) == text


def test_a_pair_after_a_masked_key_is_still_masked() -> None:
    # The first pass changes the text; the later passes look at the new text.
    text = f"{OPENAI} then password=hunter2x and {GITHUB} api_key: abc123"
    assert redact(text) == (
        "[REDACTED:openai_key] then password=[REDACTED:secret_pair] and [REDACTED:github_token]"
        " api_key: [REDACTED:secret_pair]"
    )


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("x\\\\ann@example.com", "x\\\\[REDACTED:email]"),  # an escaped backslash ends it
        ("\\\\\\nann@example.com", "\\\\\\n[REDACTED:email]"),  # so does an escaped newline
        ('"\\u00e9ann@example.com"', '"[REDACTED:email]"'),  # a JSON escape is part of it
        ("Ωann@example.com", "[REDACTED:email]"),  # a non-ASCII letter before the ASCII run
        ("é\\\\ann@example.com", "é\\\\[REDACTED:email]"),
        ("ann@example.com", "[REDACTED:email]"),  # from the text's first character
    ],
)
def test_the_local_part_ends_where_the_walk_back_would_end_it(text: str, expected: str) -> None:
    # A plain ASCII local part is found by one match; the characters before it decide whether
    # the walk back goes on.
    assert redact(text) == expected
