"""What feedback auth costs, and why one caller's cap is 5.

    .venv/bin/python bench/feedback_auth.py

1. The price of a signed feedback token on the client path (issued for every answer), of checking
   one, and of a rate-limit bucket lookup among more callers than are remembered.
2. How many corrections it takes to fail `correction_rate` at the default thresholds, per sample
   size: the smallest count is the most one caller must never reach alone
   (`analysis.max_corrections_per_caller`).
"""

from __future__ import annotations

import time
import timeit

from analyzers.judge_stats import judge
from analyzers.verdicts import ArmWindow, Thresholds
from proxy.api import TokenBuckets
from proxy.core import FeedbackTokens

REQUEST_ID = "5d1c0a9b8e7f6d5c4b3a291817161514"


def costs(n: int = 200_000) -> None:
    tokens = FeedbackTokens(7 * 86400, b"k" * 32)
    now = time.time()
    issue = timeit.timeit(lambda: tokens.issue(REQUEST_ID, now), number=n) / n
    token = tokens.issue(REQUEST_ID, now)
    assert token is not None
    verify = timeit.timeit(lambda: tokens.verify(token, REQUEST_ID, now), number=n) / n
    buckets = TokenBuckets(10, 100)
    callers = [f"addr:{i}" for i in range(20_000)]
    counter = iter(range(10**9))
    take = timeit.timeit(lambda: buckets.take(callers[next(counter) % 20_000]), number=n) / n
    print(f"token issue   {issue * 1e6:6.2f} µs per answer ({len(token)} characters)")
    print(f"token verify  {verify * 1e6:6.2f} µs per feedback post")
    print(f"bucket take   {take * 1e6:6.2f} µs (20,000 callers cycling, {len(buckets)} kept)")


def corrections_to_fail(sizes: tuple[tuple[int, int], ...]) -> None:
    th = Thresholds()
    print("canary answers  primary answers  corrections that fail correction_rate (primary 0)")
    for n_c, n_p in sizes:
        for k in range(n_c + 1):
            verdicts = judge(
                ArmWindow(n_p, 0, corrections=(0, n_p)),
                ArmWindow(n_c, 0, corrections=(k, n_c)),
                th,
                with_needs=False,
            )
            if any(v.metric == "correction_rate" and v.outcome.value == "fail" for v in verdicts):
                print(f"{n_c:14d}  {n_p:15d}  {k}")
                break


if __name__ == "__main__":
    costs()
    corrections_to_fail(((50, 50), (50, 450), (100, 900), (200, 1800), (1000, 9000)))
