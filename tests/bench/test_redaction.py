"""bench/redaction.py's records, checked so that the figures measure what they say: the secrets
record gives every pass something to mask, the other two only their e-mail address."""

from __future__ import annotations

from bench import fleet, redaction, store_write
from proxy.store.redaction import apply_bodies_policy

KINDS = (
    "secret_field", "openai_key", "github_token", "aws_key", "google_key", "slack_token",
    "bearer_token", "jwt", "secret_pair", "stripe_key", "email",
)  # fmt: skip


def test_the_secrets_record_has_every_kind_masked() -> None:
    record = apply_bodies_policy(redaction.secrets_record(), "redacted")

    assert record.request_body is not None
    for kind in KINDS:
        assert f"[REDACTED:{kind}]" in record.request_body, kind
    for text in (record.response_body, record.response_text):
        assert text is not None
        assert all(f"[REDACTED:{kind}]" in text for kind in KINDS if kind != "secret_field")


def test_the_bench_records_carry_one_address_each_and_no_other_secret() -> None:
    for record in (store_write.make_record(0), fleet.make_record(0, 0)):
        redacted = apply_bodies_policy(record, "redacted")
        assert redacted.request_body is not None
        assert redacted.request_body.count("[REDACTED:") == 1
        assert "[REDACTED:email]" in redacted.request_body
