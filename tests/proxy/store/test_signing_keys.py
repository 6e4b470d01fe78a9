"""Shared signing keys: made once, the same for every replica and after a restart."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import pytest
import sqlalchemy as sa

from proxy.store.exchanges import Store
from proxy.store.signing_keys import SigningKeyStore
from tests.proxy.store import test_exchanges as test_store

db_url = test_store.db_url
open_store = test_store.open_store


def test_the_first_caller_makes_the_key_and_every_other_reads_it(
    open_store: Callable[..., Store],
) -> None:
    store = open_store()
    first = SigningKeyStore(store).shared("feedback-tokens")
    assert len(first) == 32
    assert SigningKeyStore(store).shared("feedback-tokens") == first  # another replica
    assert SigningKeyStore(store).shared("other") != first
    with store.engine.connect() as conn:
        (stored,) = conn.execute(sa.text("SELECT secret FROM signing_keys WHERE name = :n"),
                                 {"n": "feedback-tokens"}).scalars()  # fmt: skip
    assert bytes.fromhex(stored) == first


def test_keys_asked_for_together_are_the_ones_asked_for_alone(
    open_store: Callable[..., Store],
) -> None:
    store = open_store()
    made = SigningKeyStore(store).shared("made-first")
    keys = SigningKeyStore(store).shared_many(["made-first", "new-a", "new-b"])
    assert keys["made-first"] == made  # an existing key is read, not made again
    assert len(keys["new-a"]) == len(keys["new-b"]) == 32 and keys["new-a"] != keys["new-b"]
    assert SigningKeyStore(store).shared_many(["new-a", "new-b", "made-first"]) == keys
    assert SigningKeyStore(store).shared("new-b") == keys["new-b"]  # another replica, alone


def test_keys_asked_for_together_while_another_replica_makes_one_are_its(
    open_store: Callable[..., Store], monkeypatch: pytest.MonkeyPatch
) -> None:
    store = open_store()
    keys = SigningKeyStore(store)
    read_many = keys._read_many
    raced: list[bytes] = []

    def read_before_the_other_replica(names: Sequence[str]) -> dict[str, bytes]:
        found = read_many(names)
        if not raced:  # between this replica's read and its write, the other makes one key
            raced.append(SigningKeyStore(store).shared("contended"))
        return found

    monkeypatch.setattr(keys, "_read_many", read_before_the_other_replica)
    got = keys.shared_many(["contended", "uncontended"])
    assert got["contended"] == raced[0]
    assert SigningKeyStore(store).shared("uncontended") == got["uncontended"]
