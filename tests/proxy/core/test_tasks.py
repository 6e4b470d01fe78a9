"""TaskSet: the one door for background work — tasks kept, named, their failures logged."""

from __future__ import annotations

import asyncio
import gc
import logging

import pytest

from proxy.core.tasks import TaskSet


def test_a_spawned_task_is_kept_until_it_ends_and_named() -> None:
    async def scenario() -> tuple[str, int, int, list[str]]:
        tasks = TaskSet("recorder")
        gate = asyncio.Event()
        done: list[str] = []

        async def work() -> None:
            await gate.wait()
            done.append("ran")

        task = tasks.spawn(work(), "flush")
        name = task.get_name()
        del task
        gc.collect()  # the loop keeps only a weak reference: the set must keep it alive
        running = len(tasks)
        gate.set()
        left = await tasks.wait(5)
        return name, running, left, done

    name, running, left, done = asyncio.run(scenario())
    assert name == "recorder:flush"
    assert (running, left, done) == (1, 0, ["ran"])


def test_a_failure_is_logged_with_the_task_name(caplog: pytest.LogCaptureFixture) -> None:
    async def scenario() -> int:
        tasks = TaskSet("shadows")

        async def boom() -> None:
            raise ValueError("candidate exploded")

        tasks.spawn(boom(), "cand-a")
        return await tasks.wait(5)

    with caplog.at_level(logging.ERROR, logger="mirrorgate.tasks"):
        assert asyncio.run(scenario()) == 0
    (entry,) = caplog.records
    assert "shadows:cand-a" in entry.getMessage()
    assert entry.exc_info is not None and isinstance(entry.exc_info[1], ValueError)


def test_wait_gives_up_after_its_timeout_and_cancel_all_ends_everything(
    caplog: pytest.LogCaptureFixture,
) -> None:
    async def scenario() -> tuple[int, int, int, bool]:
        tasks = TaskSet("gateway")
        stuck = tasks.spawn(asyncio.sleep(3600), "forever")
        tasks.spawn(asyncio.sleep(3600), "forever-too")
        still_running = await tasks.wait(0.01)
        cancelled = await tasks.cancel_all()
        return still_running, cancelled, len(tasks), stuck.cancelled()

    with caplog.at_level(logging.ERROR, logger="mirrorgate.tasks"):
        assert asyncio.run(scenario()) == (2, 2, 0, True)
    assert caplog.records == []  # a cancelled task is not a failure


def test_spawning_needs_a_running_loop() -> None:
    async def nothing() -> None:
        pass

    coro = nothing()
    with pytest.raises(RuntimeError):
        TaskSet("x").spawn(coro, "outside")
    coro.close()
