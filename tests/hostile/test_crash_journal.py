"""SIGKILL loses no record of an answered request (issue 12, "Deliver" 4, the crash part).

A real `mirrorgate serve` answers N requests (streamed and not) while its store cannot take
writes, so every record is in the recorder's memory; the process is killed with SIGKILL the
moment the last answer arrives; a new process on the same store replays the crash journal
before it serves: every answered request is in the store exactly once and the journal is empty.

The outage is real. SQLite: the test holds the database's write lock (`BEGIN IMMEDIATE`), so the
recorder's writes time out as they would behind a stuck writer. PostgreSQL: a TCP forwarder in
front of the server resets every connection and refuses new ones.
"""

from __future__ import annotations

import contextlib
import signal
import sqlite3
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any

import httpx
import pytest
import sqlalchemy as sa

from tests.e2e import conftest as e2e
from tests.e2e.conftest import GatewayProcess
from tests.e2e.tcp_forwarder import TcpForwarder

pytestmark = pytest.mark.e2e

# The e2e fixtures, for this folder has no conftest of its own: the mock upstream process and
# `mirrorgate serve` processes in front of it.
mock_process = e2e.mock_process
start_gateway_process = e2e.start_gateway_process

ANSWERED = 40


def ask_many(gateway: GatewayProcess, count: int) -> list[str]:
    """`count` chat requests, every other one streamed; the request ids of the answers, each
    read to its end."""
    ids: list[str] = []
    with httpx.Client(base_url=gateway.url, timeout=10) as client:
        for i in range(count):
            body = {
                "model": "echo",
                "messages": [{"role": "user", "content": f"question {i}"}],
                "stream": i % 2 == 1,
            }
            with client.stream("POST", "/v1/chat/completions", json=body) as response:
                assert response.status_code == 200
                text = response.read().decode()
                assert ("[DONE]" in text) if i % 2 else ("choices" in text)
                ids.append(response.headers["x-mirrorgate-request-id"])
    return ids


def stored(db_url: str, ids: list[str]) -> Counter[str]:
    engine = sa.create_engine(db_url)
    try:
        with engine.connect() as conn:
            rows = conn.execute(sa.text("SELECT request_id FROM exchanges")).all()
    finally:
        engine.dispose()
    wanted = set(ids)
    return Counter(row[0] for row in rows if row[0] in wanted)


def journal_files(folder: Path) -> list[Path]:
    return [p for p in folder.rglob("*") if p.is_file()] if folder.exists() else []


def kill(gateway: GatewayProcess) -> None:
    gateway.proc.send_signal(signal.SIGKILL)  # the process this test started, by its PID
    gateway.proc.wait(10)
    assert gateway.proc.returncode == -signal.SIGKILL


def metric(gateway: GatewayProcess, name: str) -> float:
    text = httpx.get(gateway.url + "/metrics", timeout=5).text
    for line in text.splitlines():
        if line.startswith(name + " "):
            return float(line.split()[1])
    return 0.0


@pytest.fixture
def journal_dir(tmp_path: Path) -> Path:
    return tmp_path / "journal"


def crash_and_restart(
    start: Callable[..., GatewayProcess],
    db_url: str,
    journal_dir: Path,
    outage: Callable[[], AbstractContextManager[None]],
    check_db_url: str,
) -> None:
    options: dict[str, Any] = {"journal_dir": str(journal_dir)}
    gateway = start(db_url, **options)
    with outage():
        ids = ask_many(gateway, ANSWERED)
        assert metric(gateway, "mirrorgate_journal_appended_total") == ANSWERED
        assert metric(gateway, "mirrorgate_recorder_written_total") == 0  # all in memory
        kill(gateway)
    assert stored(check_db_url, ids) == Counter()  # without the journal, all of it is lost
    assert len(journal_files(journal_dir)) >= 2  # its lock and a segment, left behind

    again = start(db_url, **options)  # serves only once the replay is done
    assert stored(check_db_url, ids) == Counter({i: 1 for i in ids})
    assert metric(again, "mirrorgate_journal_replayed_total") == ANSWERED
    assert metric(again, "mirrorgate_journal_unclean_total") == 1
    names = {p.name for p in journal_files(journal_dir)}
    assert all(again_name.startswith(f"{again.pid}-") for again_name in names), names

    again.terminate()  # a clean stop leaves nothing behind
    assert journal_files(journal_dir) == []
    assert stored(check_db_url, ids) == Counter({i: 1 for i in ids})


def test_sigkill_on_sqlite_loses_no_answered_record(
    tmp_path: Path,
    journal_dir: Path,
    start_gateway_process: Callable[..., GatewayProcess],
) -> None:
    db_file = tmp_path / "crash.db"
    db_url = f"sqlite:///{db_file}"

    @contextlib.contextmanager
    def locked() -> Iterator[None]:
        holder = sqlite3.connect(db_file, isolation_level=None, timeout=30)
        holder.execute("BEGIN IMMEDIATE")  # the write lock: every other writer waits, then fails
        try:
            yield
        finally:
            holder.execute("ROLLBACK")
            holder.close()

    crash_and_restart(start_gateway_process, db_url, journal_dir, locked, db_url)


def test_sigkill_on_postgresql_loses_no_answered_record(
    pg_schema: tuple[str, str],
    journal_dir: Path,
    start_gateway_process: Callable[..., GatewayProcess],
) -> None:
    db_url, _schema = pg_schema
    with TcpForwarder("127.0.0.1", 5432) as forwarder:
        via_forwarder = db_url.replace("127.0.0.1:5432", f"127.0.0.1:{forwarder.port}")
        assert via_forwarder != db_url

        @contextlib.contextmanager
        def cut() -> Iterator[None]:
            forwarder.cut()
            try:
                yield
            finally:
                forwarder.restore()

        crash_and_restart(start_gateway_process, via_forwarder, journal_dir, cut, db_url)
