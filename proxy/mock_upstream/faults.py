"""Which injected fault, if any, hits a request — decided by counters, so runs are reproducible.

Every fault configured for a model keeps its own counter per (model, fault kind), advanced by each
request the fault can apply to: `error`, `timeout` and `reset` count every request,
`garbage` and `huge_body` non-streamed ones, `disconnect_mid_stream`, `malformed_chunk` and
`endless_stream` streamed ones, `header_flood` every request. With rate
r the n-th counted request is hit when floor(n*r) > floor((n-1)*r): 0.2 hits requests 5, 10, 15...
When several faults are due at once the first in this order wins: reset, timeout, error, garbage,
disconnect_mid_stream, malformed_chunk, huge_body, endless_stream, header_flood.
"""

from __future__ import annotations

import math
from collections import Counter

from proxy.mock_upstream.behavior import (
    DisconnectFault,
    EndlessStreamFault,
    ErrorFault,
    GarbageFault,
    HeaderFloodFault,
    HugeBodyFault,
    MalformedChunkFault,
    ModelBehaviorSpec,
    ResetFault,
    TimeoutFault,
)

InjectedFault = (
    ResetFault
    | TimeoutFault
    | ErrorFault
    | GarbageFault
    | DisconnectFault
    | MalformedChunkFault
    | HugeBodyFault
    | EndlessStreamFault
    | HeaderFloodFault
)
# Absorbs float error in n*r (0.1 * 30 = 3.0000000000000004, 0.7 * 10 = 7.000000000000001).
_EPSILON = 1e-9


class RateCounter:
    """Counters keyed by (model, kind): `due` says whether the next event is one of the share
    `rate`, by the schedule floor(n*r) > floor((n-1)*r). Faults and memorised answers use it."""

    def __init__(self) -> None:
        self._seen: dict[tuple[str, str], int] = {}

    def clear(self) -> None:
        """Start every count again from the first event."""
        self._seen.clear()

    def due(self, model: str, kind: str, rate: float) -> bool:
        """Count one event of (model, kind); True when it falls in the share `rate`."""
        key = (model, kind)
        n = self._seen.get(key, 0) + 1
        self._seen[key] = n
        return math.floor(n * rate + _EPSILON) > math.floor((n - 1) * rate + _EPSILON)


class FaultSchedule:
    """The per-(model, fault) counters of one mock server."""

    def __init__(self) -> None:
        self._counter = RateCounter()
        self.injected: Counter[str] = Counter()
        """How many times each fault kind was injected (for GET /_mock/stats)."""

    def reset(self) -> None:
        """Start every schedule again from the first request."""
        self._counter.clear()
        self.injected.clear()

    def pick(self, model: str, spec: ModelBehaviorSpec, stream: bool) -> InjectedFault | None:
        """The fault that hits this request, advancing the counters of every applicable fault."""
        candidates: tuple[tuple[str, InjectedFault | None], ...] = (
            ("reset", spec.reset),
            ("timeout", spec.timeout),
            ("error", spec.error),
            ("garbage", None if stream else spec.garbage),
            ("disconnect_mid_stream", spec.disconnect_mid_stream if stream else None),
            ("malformed_chunk", spec.malformed_chunk if stream else None),
            ("huge_body", None if stream else spec.huge_body),
            ("endless_stream", spec.endless_stream if stream else None),
            ("header_flood", spec.header_flood),
        )
        chosen: InjectedFault | None = None
        for kind, fault in candidates:
            if fault is not None and self._due(model, kind, fault.rate) and chosen is None:
                chosen = fault
                self.injected[kind] += 1
        return chosen

    def _due(self, model: str, kind: str, rate: float) -> bool:
        return self._counter.due(model, kind, rate)
