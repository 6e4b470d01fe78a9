"""The crash journal: frames, torn tails, replay into a real store, commit tracking, bodies.

A process that dies is a real one: a child Python process appends to a journal and kills itself
with SIGKILL, so its lock, its page-cache writes and its leftovers are exactly what a crash
leaves.
"""

from __future__ import annotations

import signal
import subprocess
import sys
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import orjson
import pytest
from prometheus_client import CollectorRegistry

from proxy.config.specs import StoreSpec
from proxy.core.records import Arm, ExchangeRecord, Status, Usage
from proxy.store.errors import StoreError
from proxy.store.exchanges import Store
from proxy.store.journal import (
    REPLAYED_TAG,
    Journal,
    decode,
    directory_for,
    encode,
    frame,
    read_segment,
)
from proxy.store.recorder import Recorder
from tests.conftest import seed_sqlite, wait_until
from tests.proxy.store import test_exchanges as test_store
from tests.proxy.store.test_exchanges import make_record

db_url = test_store.db_url
open_store = test_store.open_store

OPENAI_KEY = "sk-proj-AbCdEfGhIjKlMnOpQrStUvWxYz_0123456789"


def fresh(**overrides: Any) -> ExchangeRecord:
    return make_record(started_at=datetime.now(UTC), **overrides)


def metric(registry: CollectorRegistry, name: str, **labels: str) -> float:
    return registry.get_sample_value(name, labels) or 0.0


@pytest.fixture
def make_journal(tmp_path: Path) -> Iterator[Callable[..., tuple[Journal, CollectorRegistry]]]:
    """Journals in `tmp_path / "journal"`, each with a fresh registry; closed after the test."""
    made: list[Journal] = []

    def make(**kwargs: Any) -> tuple[Journal, CollectorRegistry]:
        registry = CollectorRegistry()
        options: dict[str, Any] = {"bodies_policy": "full", "fsync_interval_s": 0.05, **kwargs}
        journal = Journal(tmp_path / "journal", registry=registry, **options)
        made.append(journal)
        return journal, registry

    yield make
    for journal in made:
        journal.close()


CRASHING_CHILD = """
import os, signal, sys
from pathlib import Path
from prometheus_client import CollectorRegistry
from proxy.store.journal import Journal, decode
directory, policy = Path(sys.argv[1]), sys.argv[2]
journal = Journal(directory, registry=CollectorRegistry(), bodies_policy=policy,
                  fsync_interval_s=30, segment_bytes=int(sys.argv[3]))
journal.open()
for line in sys.stdin.buffer:
    journal.append(decode(line.strip()))
os.kill(os.getpid(), signal.SIGKILL)
"""


def crash_after_appending(
    directory: Path,
    records: list[ExchangeRecord],
    *,
    policy: str = "full",
    segment_bytes: int = 1 << 26,
) -> None:
    """A real process journals `records` and dies by SIGKILL (no close, no flush to disk)."""
    child = subprocess.run(
        [sys.executable, "-c", CRASHING_CHILD, str(directory), policy, str(segment_bytes)],
        input=b"\n".join(encode(r) for r in records) + b"\n",
        capture_output=True,
        timeout=60,
        check=False,
    )
    assert child.returncode == -signal.SIGKILL, child.stderr.decode()


def leave_behind(journal: Journal, records: list[ExchangeRecord]) -> Path:
    """Journal `records` and close without the store having any: the files stay as a crash
    leaves them (the killed-process test shows it); returns the one segment."""
    journal.open()
    for record in records:
        journal.append(record)
    journal.close()
    (segment,) = journal.directory.glob("*.seg")
    return segment


def owner_files(directory: Path) -> list[str]:
    return sorted(p.name for p in directory.iterdir()) if directory.exists() else []


# --- frames -------------------------------------------------------------------------------------


def test_a_record_comes_back_equal_from_its_journal_entry() -> None:
    record = fresh(
        arm=Arm.FALLBACK,
        streamed=True,
        ttft_s=0.01,
        status=Status.CLIENT_DISCONNECTED,
        usage=Usage(10, 20, 3, 4, 5, estimated=True),
        cost_usd=0.5,
        error_class="client_disconnected",
        rule="r",
        rule_version="v2",
        tags=("a", "b"),
        request_body='{"q": "é\\u0000"}',
        response_text="ok",
        operation_id="ticket-9",
    )
    assert decode(encode(record)) == record


def test_an_entry_written_before_operations_existed_reads_without_one() -> None:
    data = orjson.loads(encode(fresh(operation_id="ticket-9")))
    del data["operation_id"]
    assert decode(orjson.dumps(data)).operation_id is None


def test_an_entry_written_by_another_version_still_reads() -> None:
    record = fresh()
    data = orjson.loads(encode(record))
    data["a_field_from_a_newer_version"] = 1
    assert decode(orjson.dumps(data)) == record


def test_a_segment_cut_anywhere_in_its_last_frame_gives_every_earlier_entry() -> None:
    payloads = [encode(fresh()) for _ in range(3)]
    data = b"".join(frame(seq, p) for seq, p in enumerate(payloads, 1))
    whole = read_segment(data)
    assert [seq for seq, _ in whole.entries] == [1, 2, 3] and not whole.torn
    last_start = len(data) - len(frame(3, payloads[2]))
    for cut in range(last_start + 1, len(data)):
        contents = read_segment(data[:cut])
        assert [p for _, p in contents.entries] == payloads[:2]
        assert contents.torn


def test_a_flipped_byte_ends_the_segment_at_the_corrupt_frame() -> None:
    payloads = [encode(fresh()) for _ in range(3)]
    frames = [frame(seq, p) for seq, p in enumerate(payloads, 1)]
    data = bytearray(b"".join(frames))
    data[len(frames[0]) + 20] ^= 0x01  # inside the second frame's payload
    contents = read_segment(bytes(data))
    assert [p for _, p in contents.entries] == payloads[:1] and contents.torn
    huge = b"\xff\xff\xff\xff" + bytes(12) + b"x"  # a length no frame has
    assert read_segment(frames[0] + huge).entries == [(1, payloads[0])]


# --- replay -------------------------------------------------------------------------------------


@pytest.mark.e2e  # a real child process, killed
def test_what_a_killed_process_journaled_is_replayed_once_and_the_journal_emptied(
    tmp_path: Path, open_store: Callable[..., Store], make_journal: Callable[..., Any]
) -> None:
    store = open_store()
    directory = tmp_path / "journal"
    records = [fresh() for _ in range(50)]
    store.write_batch(records[:10])  # committed before the crash; its journal entries remain
    crash_after_appending(directory, records, segment_bytes=4096)
    assert len([n for n in owner_files(directory) if n.endswith(".seg")]) > 1

    journal, registry = make_journal()
    report = journal.replay(store)
    assert (report.owners, report.replayed, report.already_stored, report.torn) == (1, 40, 10, 0)
    assert owner_files(directory) == []
    stored = store.query(limit=100)
    assert sorted(r.request_id for r in stored) == sorted(r.request_id for r in records)
    replayed = {r.request_id: r for r in stored if REPLAYED_TAG in r.tags}
    assert set(replayed) == {r.request_id for r in records[10:]}
    for record in records[10:]:
        assert replayed[record.request_id].cost_usd == record.cost_usd
    assert metric(registry, "mirrorgate_journal_replayed_total") == 40
    assert metric(registry, "mirrorgate_journal_unclean_total") == 1

    again, _ = make_journal()
    assert again.replay(store).replayed == 0  # nothing left to do twice
    assert store.count() == 50


def test_a_torn_last_frame_is_counted_and_the_rest_replayed(
    tmp_path: Path, open_store: Callable[..., Store], make_journal: Callable[..., Any]
) -> None:
    store = open_store()
    records = [fresh() for _ in range(5)]
    segment = leave_behind(make_journal()[0], records)
    segment.write_bytes(segment.read_bytes()[:-7])  # the last write cut short

    journal, registry = make_journal()
    report = journal.replay(store)
    assert (report.replayed, report.torn) == (4, 1)
    assert {r.request_id for r in store.query()} == {r.request_id for r in records[:4]}
    assert metric(registry, "mirrorgate_journal_torn_total") == 1


def test_entries_flushed_to_disk_but_missing_are_counted_as_lost(
    tmp_path: Path, open_store: Callable[..., Store], make_journal: Callable[..., Any]
) -> None:
    store = open_store()
    segment = leave_behind(make_journal()[0], [fresh() for _ in range(5)])
    directory = segment.parent
    owner = segment.name.rsplit("-", 1)[0]
    # The state file says entry 5 was on disk; the segment (as a machine crash that lost
    # flushed data would leave it) ends after entry 3.
    (directory / f"{owner}.state").write_bytes(
        orjson.dumps({"synced_seq": 5, "segment": segment.name})
    )
    data = segment.read_bytes()
    three = sum(len(frame(seq, p)) for seq, p in read_segment(data).entries[:3])
    segment.write_bytes(data[:three])

    journal, registry = make_journal()
    report = journal.replay(store)
    assert (report.replayed, report.lost, report.torn) == (3, 2, 0)
    assert metric(registry, "mirrorgate_journal_lost_total") == 2


def test_the_journal_of_a_live_process_is_left_alone(
    open_store: Callable[..., Store], make_journal: Callable[..., Any]
) -> None:
    store = open_store()
    live, _ = make_journal()
    live.open()
    live.append(fresh())
    other, _ = make_journal()
    assert other.replay(store).owners == 0
    assert store.count() == 0 and live.waiting() == 1


# --- commit tracking ----------------------------------------------------------------------------


def test_segments_are_deleted_once_the_store_has_every_record_in_them(
    make_journal: Callable[..., Any],
) -> None:
    journal, registry = make_journal(segment_bytes=2048)
    journal.open()
    records = [fresh() for _ in range(40)]
    for record in records:
        journal.append(record)
    segments = sorted(journal.directory.glob("*.seg"))
    assert len(segments) > 3
    assert metric(registry, "mirrorgate_journal_appended_total") == 40
    journal.settled(records[:-1])
    assert sorted(journal.directory.glob("*.seg")) == segments[-1:]  # the one being written
    assert journal.waiting() == 1
    journal.settled(records[-1:])
    journal.close()
    assert owner_files(journal.directory) == []


def test_a_steady_journal_holds_about_a_megabyte_not_a_whole_segment(
    make_journal: Callable[..., Any],
) -> None:
    journal, registry = make_journal()
    journal.open()
    for _ in range(3000):  # about 2 MB of entries, each stored at once
        record = fresh()
        journal.append(record)
        journal.settled((record,))
    assert metric(registry, "mirrorgate_journal_bytes") < 1024 * 1024
    assert len(list(journal.directory.glob("*.seg"))) == 1


def test_a_close_with_records_the_store_lacks_keeps_them_for_the_next_start(
    open_store: Callable[..., Store], make_journal: Callable[..., Any]
) -> None:
    store = open_store()
    journal, _ = make_journal()
    journal.open()
    records = [fresh() for _ in range(3)]
    for record in records:
        journal.append(record)
    store.write_batch(records[:1])
    journal.settled(records[:1])
    journal.close()  # the other two never reached the store (a drain cut short)
    nxt, _ = make_journal()
    assert nxt.replay(store).replayed == 2
    assert sorted(r.request_id for r in store.query()) == sorted(r.request_id for r in records)


def test_the_recorder_settles_what_it_committed(
    tmp_path: Path, migrated_sqlite: Path, make_journal: Callable[..., Any]
) -> None:
    journal, _ = make_journal()
    journal.open()
    url = f"sqlite:///{tmp_path / 'r.db'}"
    seed_sqlite(url, migrated_sqlite)
    store = Store(url)
    store.migrate()
    recorder = Recorder(
        store,
        queue_size=100,
        batch_size=10,
        flush_interval_s=0.01,
        registry=CollectorRegistry(),
        bodies_policy="full",
        on_settled=journal.settled,
    )
    with recorder:
        for record in (fresh() for _ in range(25)):
            journal.append(record)
            recorder.submit(record)
        wait_until(lambda: journal.waiting() == 0, what="the journal hearing every commit")
    store.close()


def test_a_flush_records_how_far_the_disk_has_the_journal(make_journal: Callable[..., Any]) -> None:
    journal, registry = make_journal()
    journal.open()
    for _ in range(3):
        journal.append(fresh())
    wait_until(
        lambda: metric(registry, "mirrorgate_journal_unsynced") == 0,
        what="the flush thread syncing",
    )
    (state,) = journal.directory.glob("*.state")
    assert orjson.loads(state.read_bytes())["synced_seq"] == 3


# --- what is journaled ---------------------------------------------------------------------------


@pytest.mark.parametrize("policy", ["full", "redacted", "none"])
def test_the_journal_holds_bodies_as_the_store_would(
    policy: str, make_journal: Callable[..., Any]
) -> None:
    journal, registry = make_journal(bodies_policy=policy, max_body_bytes=1000)
    journal.open()
    small = fresh(request_body=f'{{"key": "{OPENAI_KEY}"}}', response_text="fine")
    big = fresh(request_body="x" * 1001)
    journal.append(small)
    journal.append(big)
    (segment,) = journal.directory.glob("*.seg")
    entries = [decode(p) for _, p in read_segment(segment.read_bytes()).entries]
    assert entries[1].request_body is None  # over the limit: never serialised
    if policy == "full":
        assert entries[0] == small
    elif policy == "redacted":
        assert entries[0].request_body == '{"key": "[REDACTED:openai_key]"}'
    assert OPENAI_KEY.encode() not in segment.read_bytes() or policy == "full"
    assert metric(registry, "mirrorgate_journal_bodies_omitted_total") == 1


def test_beyond_its_size_cap_the_journal_counts_what_it_skips(
    make_journal: Callable[..., Any],
) -> None:
    journal, registry = make_journal(max_bytes=1500)
    journal.open()
    for _ in range(10):
        journal.append(fresh())
    appended = metric(registry, "mirrorgate_journal_appended_total")
    assert 0 < appended < 10
    assert metric(registry, "mirrorgate_journal_skipped_total", reason="full") == 10 - appended


def test_a_journal_that_cannot_be_written_names_its_directory_and_the_keys(
    tmp_path: Path,
) -> None:
    (tmp_path / "journal").write_text("a file where the directory should be")
    journal = Journal(tmp_path / "journal", registry=CollectorRegistry(), bodies_policy="none")
    with pytest.raises(StoreError, match=r"journal.*store\.journal_dir.*store\.journal: false"):
        journal.open()


def test_the_directory_is_next_to_the_sqlite_file_or_in_the_temp_directory(
    tmp_path: Path,
) -> None:
    sqlite = directory_for(StoreSpec(url=f"sqlite:///{tmp_path / 'x.db'}"))
    assert sqlite.parent == tmp_path / "x.db.journal"
    pg_a = directory_for(StoreSpec(url="postgresql+psycopg://u:secret@h/db?a=1"))
    pg_b = directory_for(StoreSpec(url="postgresql+psycopg://u:secret@h/db?a=2"))
    assert pg_a.parent == pg_b.parent and pg_a != pg_b
    assert "secret" not in str(pg_a)
    rotated = directory_for(StoreSpec(url="postgresql+psycopg://u:other@h/db?a=1"))
    assert rotated == pg_a  # a new password finds the same journal
    chosen = directory_for(StoreSpec(url="sqlite:///y.db", journal_dir=str(tmp_path / "j")))
    assert chosen.parent == tmp_path / "j"
    assert Journal.from_spec(StoreSpec(journal=False), registry=CollectorRegistry()) is None
