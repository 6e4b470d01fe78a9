"""How long a thread may hold the GIL while another waits for it, under `serve`.

The gateway's event loop shares the interpreter lock with its own threads: the recorder
(redaction, building rows), the analysis worker (rule checks), the OpenTelemetry exporter
(encoding a batch of spans). When one of them is running Python code and the loop becomes ready
(a client's bytes, an upstream's answer), the loop waits until that thread gives the lock up,
which CPython forces only after the switch interval: 5 ms by default. Each such wait lands on a
client request in flight, so the client path's tail was, measured, mostly that (bench/README.md,
"The production-shaped route"). `serve` sets the interval to `DEFAULT_MS` (1 ms) before it builds
the gateway; `MIRRORGATE_SWITCH_INTERVAL_MS` in its environment sets another value (to measure
it), from `MIN_MS` to `MAX_MS`. A value that is not a number in that range is named in a warning
and the default kept, so a typo never turns the setting into something else.

A shorter interval costs only when threads compete: a forced switch is a few microseconds, at
most one per interval.
"""

from __future__ import annotations

import logging
import math
import sys
from collections.abc import Mapping

log = logging.getLogger("mirrorgate.serve")

VARIABLE = "MIRRORGATE_SWITCH_INTERVAL_MS"
DEFAULT_MS = 1.0
MIN_MS = 0.1
MAX_MS = 100.0


def switch_interval_ms(env: Mapping[str, str]) -> float:
    """The interval `serve` uses, in milliseconds: `MIRRORGATE_SWITCH_INTERVAL_MS` when it is a
    number from `MIN_MS` to `MAX_MS`, else `DEFAULT_MS` (with a warning if it was set)."""
    raw = env.get(VARIABLE, "").strip()
    if not raw:
        return DEFAULT_MS
    try:
        value = float(raw)
    except ValueError:
        value = math.nan
    if not MIN_MS <= value <= MAX_MS:  # also false for nan
        log.warning(
            "%s=%r is not a number of milliseconds from %g to %g: using %g",
            VARIABLE, raw[:40], MIN_MS, MAX_MS, DEFAULT_MS,
        )  # fmt: skip
        return DEFAULT_MS
    return value


def set_switch_interval(env: Mapping[str, str]) -> float:
    """Set the interpreter's switch interval from `env` (see `switch_interval_ms`); returns it
    in milliseconds."""
    value = switch_interval_ms(env)
    sys.setswitchinterval(value / 1000)
    return value
