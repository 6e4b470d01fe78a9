"""bench/fleet.py's core, run small so that it does not rot: two writer processes, each a real
recorder with redacted bodies, land every record they submit in one PostgreSQL table. (The runs
with 1, 4 and 10 processes and their figures are in bench/README.md.)"""

from __future__ import annotations

import threading

import pytest

from bench import fleet
from proxy.store.exchanges import Store


@pytest.mark.postgres
@pytest.mark.e2e  # two real writer processes, each submitting for a wall-clock second
def test_two_writer_processes_land_every_record(pg_schema: tuple[str, str]) -> None:
    url, _schema = pg_schema
    store = Store(url)
    store.migrate()
    store.close()

    result = fleet.run_fleet(url, processes=2, rate=150, seconds=1.0)

    assert [w.submitted > 0 for w in result.writers] == [True, True]
    assert result.total("submitted") >= 200
    assert result.total("dropped") == 0
    assert result.total("written") == result.total("submitted")
    assert result.rows_in_table == result.total("submitted")


def test_a_record_carries_about_two_kilobytes_of_chat_text() -> None:
    record = fleet.make_record(worker=3, i=7)

    assert record.request_id == "req-3-7"
    texts = (record.request_body, record.response_body, record.response_text)
    assert all(texts)
    assert 1800 <= sum(len(text or "") for text in texts) <= 2600


def test_the_recorder_threads_cpu_is_read_by_thread_name() -> None:
    release = threading.Event()
    thread = threading.Thread(target=release.wait, name="mirrorgate-recorder-probe")
    other = threading.Thread(target=release.wait, name="someone-else")
    thread.start()
    other.start()
    try:
        cpu = fleet.recorder_thread_cpu_s()
    finally:
        release.set()
        thread.join()
        other.join()
    assert "mirrorgate-recorder-probe" in cpu and cpu["mirrorgate-recorder-probe"] >= 0
    assert "someone-else" not in cpu
