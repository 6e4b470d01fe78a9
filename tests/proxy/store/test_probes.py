"""Rule-flip probes' results: stored by the recorder's batch, counted per target, read back as
examples; on SQLite and PostgreSQL."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from datetime import timedelta

from proxy.core import ProbeRecord
from proxy.store import ProbeStore, ProbeTally, apply_bodies_policy
from proxy.store.exchanges import Store
from tests.proxy.store import test_exchanges as test_store
from tests.proxy.store.test_exchanges import T0

db_url = test_store.db_url
open_store = test_store.open_store


def probe(n: int, target: str, result: str, **changes: object) -> ProbeRecord:
    record = ProbeRecord(
        probe_id=f"p{n}", request_id=f"r{n}", route="bot", target=target, rule="shipping",
        rule_version="v1", created_at=T0 + timedelta(seconds=n), original_value="100",
        asked_value="150", result=result,
        answered_value={"followed": "150", "stuck": "100"}.get(result), cost_usd=0.001,
    )  # fmt: skip
    return replace(record, **changes)  # type: ignore[arg-type]


def test_tallies_count_each_targets_results_under_every_filter(
    open_store: Callable[..., Store],
) -> None:
    store = open_store()
    store.write_batch(
        [probe(i, "prod", "followed") for i in range(3)]
        + [probe(10 + i, "cand", "stuck") for i in range(4)]
        + [probe(20, "cand", "other"), probe(21, "cand", "followed", rule_version="v2")]
        + [probe(30, "cand", "followed", rule="other-rule"), probe(31, "cand", "stuck", route="x")]
    )
    probes = ProbeStore(store)
    assert probes.tallies("shipping") == {
        "prod": ProbeTally(followed=3),
        "cand": ProbeTally(followed=1, stuck=5, other=1),
    }
    assert probes.tallies("shipping", route="bot", version="v1") == {
        "prod": ProbeTally(followed=3),
        "cand": ProbeTally(stuck=4, other=1),
    }
    assert probes.tallies("shipping", since=T0 + timedelta(seconds=11), targets=["cand"]) == {
        "cand": ProbeTally(followed=1, stuck=4, other=1)
    }
    assert probes.tallies("shipping")["cand"].probes == 7
    assert probes.tallies("nothing") == {}


def test_recent_reads_the_newest_examples_back_as_they_were_stored(
    open_store: Callable[..., Store],
) -> None:
    store = open_store()
    stored = [probe(i, "cand", "stuck") for i in range(8)]
    store.write_batch(stored)
    probes = ProbeStore(store)
    newest = probes.recent("shipping", target="cand", result="stuck", limit=3)
    assert newest == stored[::-1][:3]
    assert newest[0].created_at.tzinfo is not None
    assert probes.recent("shipping", result="followed") == []


def test_an_answered_value_is_cut_to_its_bound_and_redacted_as_bodies_say() -> None:
    secret = probe(1, "cand", "other", answered_value="call me at alice@example.com")
    assert apply_bodies_policy(secret, "none").answered_value is None
    redacted = apply_bodies_policy(secret, "redacted").answered_value
    assert redacted is not None and "alice@example.com" not in redacted
    assert apply_bodies_policy(secret, "full") is secret


def test_a_long_answered_value_is_stored_cut(open_store: Callable[..., Store]) -> None:
    store = open_store()
    store.write_batch([probe(1, "cand", "other", answered_value="9" * 5000)])
    (back,) = ProbeStore(store).recent("shipping")
    assert back.answered_value == "9" * 200
