"""Resuming replays: which (recorded request, candidate) pairs a previous run already stored.

A replay is done once its result is in the store: the `PairRecord` of kind `replay` (keyed by route,
request id and candidate) or, for requests with nothing to compare with (a file line without
`response`), the candidate's own record tagged `replay`. Results are written answer and pair
together, so a stored pair always has its answer. A request that failed on the candidate is done
too: the failure is the result. Evaluation sets are not resumed: each run scores every item.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

from proxy.core import Arm
from proxy.store import Store

from .job import ReplayJob

_ALL = 2**62
"""A `limit` that never limits."""


def pending_jobs(store: Store, jobs: Sequence[ReplayJob]) -> tuple[list[ReplayJob], Counter[str]]:
    """The jobs not replayed yet, and how many were, per candidate. Raises `StoreError`."""
    done: set[tuple[str, str, str]] = set()
    for candidate in {job.candidate for job in jobs}:
        for pair in store.query_pairs(kind="replay", candidate=candidate, limit=_ALL):
            done.add((pair.route, pair.request_id, candidate))
    pending: list[ReplayJob] = []
    skipped: Counter[str] = Counter()
    for job in jobs:
        if (job.route, job.request_id, job.candidate) in done or (
            job.reference is None and _answer_stored(store, job)
        ):
            skipped[job.candidate] += 1
        else:
            pending.append(job)
    return pending, skipped


def _answer_stored(store: Store, job: ReplayJob) -> bool:
    records = store.query(
        request_id=job.request_id, route=job.route, target=job.candidate, arm=Arm.SHADOW, limit=_ALL
    )
    return any("replay" in record.tags for record in records)
