"""A progress bar on stderr for long offline runs: done/total, rate and time left.

On a terminal it redraws one line in place (at most ten times a second); anywhere else (a log file,
CI) it writes one plain line each time another 5 % is done, so logs stay readable.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TextIO

_WIDTH = 30
_REDRAW_S = 0.1
_LINE_STEP = 0.05


class ProgressBar:
    """Counts finished units of work out of `total` and shows it on `stream`."""

    def __init__(
        self,
        total: int,
        stream: TextIO,
        *,
        label: str = "replay",
        tty: bool | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.total = max(0, total)
        self.done = 0
        self._stream = stream
        self._label = label
        self._tty = stream.isatty() if tty is None else tty
        self._clock = clock
        self._started = clock()
        self._drawn_at = -_REDRAW_S
        self._next_line = _LINE_STEP

    def advance(self, count: int = 1) -> None:
        """`count` more units are finished."""
        self.done = min(self.total, self.done + count)
        now = self._clock()
        if self._tty:
            if now - self._drawn_at >= _REDRAW_S or self.done == self.total:
                self._drawn_at = now
                self._stream.write("\r" + self._text(now) + "\x1b[K")
                self._stream.flush()
        elif self.total and self.done / self.total >= self._next_line - 1e-9:
            while self._next_line <= self.done / self.total + 1e-9:
                self._next_line += _LINE_STEP
            self._stream.write(self._text(now) + "\n")
            self._stream.flush()

    def close(self) -> None:
        """End the bar's line (terminal only); call once, when the run stops for any reason."""
        if self._tty:
            self._stream.write("\r" + self._text(self._clock()) + "\x1b[K\n")
            self._stream.flush()

    def _text(self, now: float) -> str:
        elapsed = max(now - self._started, 1e-9)
        speed = self.done / elapsed
        left = self.total - self.done
        eta = _clock_text(left / speed) if speed > 0 else "--:--"
        share = self.done / self.total if self.total else 1.0
        counts = f"{self.done}/{self.total} ({share:.0%}) {speed:.1f}/s ETA {eta}"
        if not self._tty:
            return f"{self._label}: {counts}"
        filled = round(_WIDTH * share)
        return f"{self._label} [{'#' * filled}{'.' * (_WIDTH - filled)}] {counts}"


def _clock_text(seconds: float) -> str:
    whole = round(seconds)
    hours, rest = divmod(whole, 3600)
    minutes, secs = divmod(rest, 60)
    return f"{hours}:{minutes:02d}:{secs:02d}" if hours else f"{minutes}:{secs:02d}"
