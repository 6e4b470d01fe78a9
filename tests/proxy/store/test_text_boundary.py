"""Text the databases refuse is made storable for every table, on both backends."""

from __future__ import annotations

from collections.abc import Callable

import sqlalchemy as sa

from proxy.core import FeedbackRecord
from proxy.store import FeedbackStore, Store
from proxy.store.text_boundary import normalised_parameters, storable
from tests.proxy.store.test_exchanges import db_url, make_record, open_store

__all__ = ["db_url", "open_store"]  # the fixtures, on both backends


def test_storable_replaces_nul_and_lone_surrogates_only() -> None:
    assert storable("plain") == "plain"
    assert storable("a\x00b") == "a\ufffdb"
    assert storable("é\ud800\udfff😀\x00") == "é\ufffd\ufffd😀\ufffd"


def test_the_hook_cleans_single_and_many_parameter_sets() -> None:
    hook: Callable[..., tuple[str, object]] = normalised_parameters
    assert hook(None, None, "s", {"a": "x\x00", "b": 1}, None, False) == (
        "s",
        {"a": "x\ufffd", "b": 1},
    )
    assert hook(None, None, "s", [("x\x00", 2), ("ok", 3)], None, True) == (
        "s", [("x\ufffd", 2), ("ok", 3)],
    )  # fmt: skip
    clean = {"a": "fine"}
    assert hook(None, None, "s", clean, None, False)[1] is clean  # nothing to do: no copy


def test_every_table_takes_nul_and_lone_surrogates(open_store: Callable[..., Store]) -> None:
    store = open_store()
    store.write_batch([make_record(response_text="nul \x00 lone \ud800", error_class="E\x00")])
    [stored] = store.query()
    assert (stored.response_text, stored.error_class) == ("nul \ufffd lone \ufffd", "E\ufffd")
    feedback = FeedbackStore(store)
    record = make_record()
    assert feedback.add(
        FeedbackRecord(
            request_id="r\x00", kind="label", route=record.route, target=record.target,
            arm=record.arm, created_at=record.started_at, label="l\ud800",
        )
    )  # fmt: skip
    [row] = feedback.query()
    assert (row.request_id, row.label) == ("r\ufffd", "l\ufffd")
    with store.engine.connect() as conn:  # a statement of any query object goes through it too
        assert conn.execute(sa.text("SELECT :v"), {"v": "x\x00"}).scalar() == "x\ufffd"
