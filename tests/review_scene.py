"""Pairs for blind review, written straight into the store: mirrored requests of route `bot`
(see `tests.e2e.conftest.rollout_gateway_config`), each with the primary's answer and the canary
model's shadow answer. The review browser test scores them; `make screenshots` shows one."""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any

from proxy.core import Arm, ExchangeRecord, PairRecord, Status

PAIRS = 10
MARKUP = '<script>window.__ran = 1</script><img src="x" onerror="window.__ran = 2">'
"""An answer that must be shown as text and never run."""


def review_pairs(
    now: datetime, count: int = PAIRS, *, markup_first: bool = True
) -> list[ExchangeRecord | PairRecord]:
    """`count` mirrored requests of route `bot` at `now`: the primary's (`rule-follower`) answer
    and the canary model's (`stale`) shadow answer to each, every third pair disagreeing; with
    `markup_first`, the first shadow answer is `MARKUP`."""
    records: list[ExchangeRecord | PairRecord] = []
    for n in range(count):
        body = json.dumps(
            {"model": "bot", "messages": [
                {"role": "system", "content": "Ship parcels; max_weight = 100"},
                {"role": "user", "content": f"Can I send parcel number {n}?"}]}
        )  # fmt: skip
        common: dict[str, Any] = dict(
            request_id=f"req-{n}", route="bot", endpoint="chat.completions", provider="openai",
            streamed=False, started_at=now, duration_s=0.2, ttft_s=None, overhead_s=0.001,
            status=Status.OK, http_status=200, request_body=body,
        )  # fmt: skip
        records.append(
            ExchangeRecord(
                **common,
                target="rule-follower",
                upstream_model="rule-follower",
                arm=Arm.PRIMARY,
                response_text=f"Yes: parcel {n} may weigh up to 100 kg.",
            )
        )
        records.append(
            ExchangeRecord(
                **common,
                target="stale",
                upstream_model="stale",
                arm=Arm.SHADOW,
                pair_id=f"pair-{n}",
                response_text=(
                    MARKUP if markup_first and n == 0 else f"Parcel {n}: 100 kg at most, yes."
                ),
            )
        )
        records.append(
            PairRecord(
                pair_id=f"pair-{n}",
                kind="shadow",
                request_id=f"req-{n}",
                route="bot",
                primary_target="rule-follower",
                candidate_target="stale",
                created_at=now,
                primary_status="ok",
                candidate_status="ok",
                exact_equal=False,
                normalized_equal=False,
                json_equal=None,
                agreement="disagree" if n % 3 == 0 else "agree",
            )
        )
    return records
