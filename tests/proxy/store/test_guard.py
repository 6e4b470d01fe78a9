"""The guard's store: answers counted once however many checks they had, the newest rule version
and the one it replaced, and one decision per (route, rule, version)."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from proxy.core.records import Arm, CheckRecord
from proxy.store.exchanges import Store
from proxy.store.guard import AnswerTally, GuardStore
from proxy.store.rule_events import RuleEvent, RuleEventStore
from tests.conftest import seed_sqlite

T0 = datetime(2026, 1, 1, tzinfo=UTC)


@pytest.fixture
def store(tmp_path: Path, migrated_sqlite: Path) -> Iterator[Store]:
    url = f"sqlite:///{tmp_path / 'guard.db'}"
    seed_sqlite(url, migrated_sqlite)
    with Store(url) as opened:
        opened.migrate()
        yield opened


def verdict(request: str, check: str, result: str, *, arm: Arm = Arm.PRIMARY) -> CheckRecord:
    return CheckRecord(
        request_id=request, route="bot", target="prod" if arm is Arm.PRIMARY else "cand",
        arm=arm, rule="shipping", rule_version="v2", check=check, result=result, reason="",
        created_at=T0 + timedelta(seconds=1),
    )  # fmt: skip


def test_an_answer_counts_once_and_fails_if_any_check_did_not_pass(store: Store) -> None:
    store.write_batch(
        [
            verdict("a", "json", "pass"), verdict("a", "weight", "fail"),
            verdict("b", "json", "pass"), verdict("b", "weight", "pass"),
            verdict("c", "json", "error"),
            verdict("a", "json", "pass", arm=Arm.SHADOW),
        ]
    )  # fmt: skip
    rows = GuardStore(store).answer_tallies("bot", "shipping", "v2", T0)
    assert sorted(rows, key=lambda r: r.arm) == sorted(
        [AnswerTally(Arm.PRIMARY, "prod", 3, 2), AnswerTally(Arm.SHADOW, "cand", 1, 0)],
        key=lambda r: r.arm,
    )
    assert GuardStore(store).answer_tallies("bot", "shipping", "v2", T0 + timedelta(hours=1)) == []
    failing = GuardStore(store).failing_requests(
        "bot", "shipping", "v2", arm=Arm.PRIMARY, target="prod", since=T0
    )
    assert sorted(failing) == ["a", "c"]


def test_epochs_are_the_newest_version_and_the_one_it_replaced(store: Store) -> None:
    guard = GuardStore(store)
    assert guard.epochs("shipping") is None
    events = RuleEventStore(store)
    events.add(RuleEvent("shipping", "v1", None, T0, "r1", "bot", ""))
    first = guard.epochs("shipping")
    assert first is not None and first.newest.version == "v1" and first.previous is None
    events.add(RuleEvent("shipping", "v2", "v1", T0 + timedelta(minutes=5), "r2", "bot", ""))
    epochs = guard.epochs("shipping")
    assert epochs is not None and epochs.previous is not None
    assert (epochs.newest.version, epochs.previous.version) == ("v2", "v1")
    assert epochs.previous.started_at == T0


def test_one_decision_per_route_rule_and_version(store: Store) -> None:
    guard = GuardStore(store)
    claim = {"outcome": "alerted", "reason": "r", "evidence": {"n": 1}, "now": T0}
    assert guard.claim("bot", "shipping", "v2", **claim)  # type: ignore[arg-type]
    assert not guard.claim("bot", "shipping", "v2", **claim)  # type: ignore[arg-type]
    assert guard.claim("bot", "shipping", "v3", **claim)  # type: ignore[arg-type]
    guard.mark_switched("bot", "shipping", "v2", "cand", T0)
    decision = guard.decision("bot", "shipping", "v2")
    assert decision is not None and (decision.outcome, decision.model) == ("switched", "cand")
    assert guard.decision("other", "shipping", "v2") is None
    with pytest.raises(ValueError, match="outcome"):
        guard.claim("bot", "shipping", "v4", outcome="maybe", reason="", evidence={}, now=T0)
