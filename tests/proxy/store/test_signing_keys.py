"""Shared signing keys: made once, the same for every replica and after a restart."""

from __future__ import annotations

from collections.abc import Callable

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
