"""SignalStop: SIGINT/SIGTERM become calls on the event loop, for the length of a block."""

from __future__ import annotations

import asyncio
import signal

from proxy.replay.interruption import SignalStop


def test_signals_reach_the_loop_including_those_sent_before_it_was_attached() -> None:
    seen: list[str] = []
    before = signal.getsignal(signal.SIGINT)

    async def run(stop: SignalStop) -> None:
        both = asyncio.Event()

        def note(name: str) -> None:
            seen.append(name)
            if len(seen) == 2:
                both.set()

        stop.attach(asyncio.get_running_loop(), note)
        signal.raise_signal(signal.SIGTERM)
        await asyncio.wait_for(both.wait(), timeout=10)
        stop.detach()

    with SignalStop() as stop:
        signal.raise_signal(signal.SIGINT)  # no loop yet: kept
        asyncio.run(run(stop))
        signal.raise_signal(signal.SIGINT)  # after detach: ignored, no KeyboardInterrupt
    assert seen == ["SIGINT", "SIGTERM"]
    assert signal.getsignal(signal.SIGINT) is before
