"""The one way a call off the client path is made (a shadow, a rule-flip probe): read to its end
within a time limit of its own, and its records handed to the sinks without letting one sink's
failure stop the others."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Iterable
from datetime import UTC, datetime

from proxy.core import Arm, RecordSink, Status, StoredRecord, UpstreamTimeout
from proxy.upstream import Attempt, CallContext, ModelCaller

log = logging.getLogger("mirrorgate.mirror")


async def call_within(
    caller: ModelCaller,
    ctx: CallContext,
    target: str,
    arm: Arm,
    timeout_s: float | None,
    *,
    what: str,
) -> Attempt:
    """Call `target` (reading a stream to its end) within `timeout_s` (None: the model's own
    timeouts only). Past it the call is closed and its attempt ends `timeout`, with the error
    class `<what>_timeout` (`what`: `shadow`, `probe`)."""
    started = (time.perf_counter(), datetime.now(UTC), time.time_ns())
    holder: list[Attempt] = []

    async def call() -> None:
        attempt = await caller.open(ctx, target, arm)
        holder.append(attempt)
        await caller.consume(ctx, attempt)

    try:
        await asyncio.wait_for(call(), timeout_s)
    except TimeoutError:
        attempt = (
            holder[0]
            if holder
            else Attempt(target, arm, b"", *started, caller.client_for(ctx, target))
        )
        attempt.status, attempt.error_class = Status.TIMEOUT, f"{what}_timeout"
        attempt.error = UpstreamTimeout(f"{what} of '{target}' exceeded its timeout_s")
        if attempt.response is not None:
            await attempt.response.aclose()
        return attempt
    return holder[0]


def http_status(attempt: Attempt) -> int:
    """The HTTP status the call's record carries (0 when no answer came)."""
    if attempt.error is not None:
        return attempt.error.status
    return attempt.response.status_code if attempt.response is not None else 0


def emit(sinks: Iterable[RecordSink], item: StoredRecord) -> None:
    """Hand `item` to every sink; a sink that raises is logged and the others still get it."""
    for sink in sinks:
        try:
            sink(item)
        except Exception:
            log.exception("record sink %r failed", sink)
