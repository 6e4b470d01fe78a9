"""Deterministic sampling: the same key always lands on the same side of a rate."""

from __future__ import annotations

import hashlib


def sampled(key: str, salt: str, rate: float) -> bool:
    """Whether the request keyed `key` is in the `rate` share for `salt` (a candidate's name).

    The same key always gives the same answer, so a user's whole conversation is shadowed or none
    of it, and tests can compute the exact expected set.
    """
    if rate >= 1.0:
        return True
    if rate <= 0.0:
        return False
    digest = hashlib.blake2b(f"{salt}\x00{key}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") < rate * 2**64
