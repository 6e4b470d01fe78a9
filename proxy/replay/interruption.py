"""Ctrl-C and SIGTERM for an offline run: stop it cleanly instead of dying mid-write.

`SignalStop` routes SIGINT and SIGTERM, for the length of a `with` block, to a callback run on the
event loop (`on_signal(name)`, given to `attach`). It uses plain `signal.signal` handlers,
not `loop.add_signal_handler`, for one reason: the loop puts Python's default handler back when
it closes, so a Ctrl-C that arrives between the end of the run and the end of the summary would
raise `KeyboardInterrupt` and lose the summary. Here the handlers stay until the block ends, then
the previous ones are restored. A signal that arrives before a loop is attached is kept and
delivered on `attach`. Outside the main thread (where Python cannot take signals) it does nothing.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
import threading
from collections.abc import Callable
from types import FrameType, TracebackType
from typing import Any

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)


class SignalStop:
    """See the module docstring."""

    def __init__(self) -> None:
        self._on_signal: Callable[[str], None] | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._early: list[str] = []
        self._detached = False
        self._previous: dict[signal.Signals, Any] = {}

    def attach(self, loop: asyncio.AbstractEventLoop, on_signal: Callable[[str], None]) -> None:
        """Call `on_signal(name)` on `loop` for each signal from now on (and those that came
        before)."""
        self._loop, self._on_signal = loop, on_signal
        for name in self._early:
            loop.call_soon(on_signal, name)
        self._early.clear()

    def detach(self) -> None:
        """The loop is done: later signals are ignored until the block ends."""
        self._loop = self._on_signal = None
        self._detached = True

    def _handle(self, signum: int, _frame: FrameType | None) -> None:
        name = signal.Signals(signum).name
        loop, on_signal = self._loop, self._on_signal
        if loop is None or on_signal is None:
            if not self._detached:
                self._early.append(name)
            return
        with contextlib.suppress(RuntimeError):  # the loop closed in the meantime
            loop.call_soon_threadsafe(on_signal, name)

    def __enter__(self) -> SignalStop:
        if threading.current_thread() is threading.main_thread():
            for sig in STOP_SIGNALS:
                self._previous[sig] = signal.signal(sig, self._handle)
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        for sig, previous in self._previous.items():
            signal.signal(sig, previous)
        self._previous.clear()
