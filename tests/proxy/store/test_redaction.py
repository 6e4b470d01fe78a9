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
