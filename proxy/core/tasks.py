"""The one door for fire-and-forget work: tasks that are referenced, named, and whose failure is
logged (the event loop keeps only weak references to tasks; a bare `create_task` can vanish)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Coroutine
from typing import Any

log = logging.getLogger("mirrorgate.tasks")


class TaskSet:
    """Background tasks of one component; `cancel_all` ends them at shutdown."""

    def __init__(self, name: str) -> None:
        self.name = name
        self._tasks: set[asyncio.Task[Any]] = set()

    def __len__(self) -> int:
        return len(self._tasks)

    def spawn(self, coro: Coroutine[Any, Any, Any], name: str) -> asyncio.Task[Any]:
        """Run `coro` in the background; it is kept alive until it ends, and a failure is logged."""
        task = asyncio.get_running_loop().create_task(coro, name=f"{self.name}:{name}")
        self._tasks.add(task)
        task.add_done_callback(self._done)
        return task

    def _done(self, task: asyncio.Task[Any]) -> None:
        self._tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.error("background task %s failed", task.get_name(), exc_info=task.exception())

    async def wait(self, timeout_s: float) -> int:
        """Wait up to `timeout_s` for the running tasks; return how many are still running."""
        if self._tasks:
            await asyncio.wait(set(self._tasks), timeout=timeout_s)
        return len(self._tasks)

    async def cancel_all(self) -> int:
        """Cancel every running task and wait for them; return how many were cancelled."""
        tasks = set(self._tasks)
        for task in tasks:
            task.cancel()
        if tasks:
            await asyncio.wait(tasks)
        return len(tasks)
