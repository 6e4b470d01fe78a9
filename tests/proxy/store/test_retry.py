"""The one retry loop for store writes: only outages are retried, with doubling waits."""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Callable

import pytest

from proxy.store.errors import RecordRejectedError, StoreUnavailableError
from proxy.store.retry import WriteRetry


def failing(times: int, error: Exception, result: str = "written") -> Callable[[], str]:
    calls = itertools.count(1)

    def write() -> str:
        if next(calls) <= times:
            raise error
        return result

    return write


def test_waits_double_up_to_the_cap() -> None:
    delays = WriteRetry(0.05, 0.3).delays()
    assert [next(delays) for _ in range(6)] == [0.05, 0.1, 0.2, 0.3, 0.3, 0.3]
    with pytest.raises(ValueError):
        WriteRetry(1.0, 0.5)


def test_an_outage_is_waited_out_and_each_failure_reported() -> None:
    waits: list[float] = []
    told: list[tuple[str, int]] = []
    result = WriteRetry(0.05, 5.0).call(
        failing(3, StoreUnavailableError("locked")),
        wait=lambda delay: waits.append(delay) is None,
        on_unavailable=lambda exc, failures: told.append((str(exc), failures)),
    )
    assert result == "written"
    assert waits == [0.05, 0.1, 0.2]
    assert told == [("locked", 1), ("locked", 2), ("locked", 3)]


@pytest.mark.parametrize("error", [RecordRejectedError("bad row"), RuntimeError("a bug")])
def test_anything_but_an_outage_leaves_at_once(error: Exception) -> None:
    waits: list[float] = []
    with pytest.raises(type(error)):
        WriteRetry().call(failing(1, error), wait=lambda delay: waits.append(delay) is None)
    assert waits == []


def test_a_caller_that_stops_waiting_gets_the_last_outage() -> None:
    attempts = itertools.count(1)

    def write() -> str:
        raise StoreUnavailableError(f"attempt {next(attempts)}")

    waits: list[float] = []

    def wait_once(delay: float) -> bool:
        waits.append(delay)
        return len(waits) < 2  # the second wait is refused: the caller is stopping

    with pytest.raises(StoreUnavailableError, match="attempt 2"):
        WriteRetry().call(write, wait=wait_once)
    assert waits == [0.05, 0.1]


def test_the_event_loop_driver_retries_the_same_way_and_ends_when_cancelled() -> None:
    retry = WriteRetry(0.001, 0.002)

    async def scenario() -> tuple[str, list[int]]:
        told: list[int] = []
        result = await retry.call_async(
            failing(2, StoreUnavailableError("down")),
            on_unavailable=lambda _exc, failures: told.append(failures),
        )
        retrying = asyncio.Event()
        forever = asyncio.get_running_loop().create_task(
            retry.call_async(
                failing(10**9, StoreUnavailableError("down for good")),
                on_unavailable=lambda _exc, failures: failures >= 3 and retrying.set(),
            )
        )
        await asyncio.wait_for(retrying.wait(), timeout=10)
        forever.cancel()
        with pytest.raises(asyncio.CancelledError):
            await forever
        return result, told

    assert asyncio.run(scenario()) == ("written", [1, 2])
