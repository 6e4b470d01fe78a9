"""Garbage-collection pauses, measured: `mirrorgate_gc_pause_seconds{generation}`, and the freeze.

CPython's cyclic collector stops the whole process while it runs, event loop included: a full
(generation 2) collection of a gateway that holds tens of thousands of live objects takes tens of
milliseconds, and every request in flight waits for it. A latency tail that nothing in the
request path explains is often one of these, so the pauses are measured where they happen:
`gc.callbacks` calls us at the start and the stop of every collection, in whichever thread
triggered it, and the difference goes into the histogram of the generation collected.

The family is `GatewayMetrics.gc_pause`, in the catalogue like every other. `gc.callbacks`
belongs to the process, gateways to a registry each: one callback is installed
for the process and feeds every histogram that `watch` was given, until `unwatch`. It never
raises (an exception in a gc callback is printed and lost) and costs one clock read and one
histogram observation per collection.

`freeze_startup_objects` is for a process that serves one gateway (`mirrorgate serve`): after
start-up it collects once and moves every object alive then (modules, config, the app's routes)
into the permanent generation with `gc.freeze()`, so later full collections no longer walk them.
They are still freed by reference counting; only the cycle search skips them. Tests and embedded
gateways do not call it: a process that builds many gateways would keep their cycles for ever.
`MIRRORGATE_GC_FREEZE=0` turns it off for `serve` (`freeze_wanted`): only to measure what the
freeze buys (bench/pauses.py), not a tuning knob.
"""

from __future__ import annotations

import gc
import threading
import time
from collections.abc import Mapping
from typing import Any

from prometheus_client import Histogram


class _Collections:
    """The process's one callback state: the histograms fed, when the running collection began."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.watched: tuple[Histogram, ...] = ()
        self.started_at: float | None = None


_state = _Collections()


def _on_collection(phase: str, info: dict[str, Any]) -> None:
    try:
        if phase == "start":
            _state.started_at = time.perf_counter()
            return
        started, _state.started_at = _state.started_at, None
        if started is None:
            return
        seconds = time.perf_counter() - started
        generation = str(info.get("generation", ""))
        for histogram in _state.watched:
            histogram.labels(generation).observe(seconds)
    except Exception:  # never out of the collector: there it would be printed and lost
        return


def watch(histogram: Histogram) -> None:
    """Feed `histogram` with every collection of this process from now on."""
    with _state.lock:
        if not any(h is histogram for h in _state.watched):
            _state.watched = (*_state.watched, histogram)
        if _on_collection not in gc.callbacks:
            gc.callbacks.append(_on_collection)


def unwatch(histogram: Histogram) -> None:
    """Stop feeding `histogram`; the process callback goes when nothing is watched."""
    with _state.lock:
        _state.watched = tuple(h for h in _state.watched if h is not histogram)
        if not _state.watched and _on_collection in gc.callbacks:
            gc.callbacks.remove(_on_collection)


FREEZE_VARIABLE = "MIRRORGATE_GC_FREEZE"


def freeze_wanted(env: Mapping[str, str]) -> bool:
    """Whether `serve` freezes its start-up objects: yes unless `MIRRORGATE_GC_FREEZE` is `0`.

    Any other value (unset, empty, `1`) keeps the default, so a typo never turns the freeze off.
    """
    return env.get(FREEZE_VARIABLE, "").strip() != "0"


def freeze_startup_objects() -> int:
    """Collect once, then freeze what is alive (see the module docstring); the number frozen."""
    gc.collect()
    gc.freeze()
    return gc.get_freeze_count()
