"""The Dirichlet-multinomial Bayes factor against fixed category probabilities: an e-process for
testing, look after look, whether counts follow given shares (pure: numbers in, a number out).

Each observation falls in category i with probability θᵢ under the null, θ₀. The alternative
mixes over θ ~ Dirichlet(k·θ₀): centred on the null, `concentration` k saying how far from it the
mixture spreads (prior standard deviation of θᵢ about √(θᵢ(1 - θᵢ) / (k + 1))). After n
observations with counts xᵢ the Bayes factor of the mixture against the null is

    BFₙ = Γ(k) / Γ(k + n) · Πᵢ Γ(kθᵢ + xᵢ) / Γ(kθᵢ) / Πᵢ θᵢ^xᵢ,

the ratio of the two marginal likelihoods of the observed sequence. It depends on the counts
only, and under the null it is a non-negative martingale with mean 1, so by Ville's
inequality the chance that it ever reaches 1/alpha, at any of arbitrarily many looks, is at most
alpha: flagging when BFₙ >= 1/alpha is valid under continuous monitoring, and min(1, 1/BFₙ) is
an anytime-valid p-value (Lindon & Malek 2022, "Anytime-Valid Inference for Multinomial
Count Data", NeurIPS). Under an alternative θ the log Bayes factor grows like n·KL(θ ‖ θ₀)
less a price of about (d/2)·log(n/k) for the mixture over d free shares, so it flags after
about (log(1/alpha) + price) / KL observations.
"""

from __future__ import annotations

import math
from collections.abc import Sequence


def log_bayes_factor(
    counts: Sequence[int], probabilities: Sequence[float], concentration: float
) -> float:
    """log BFₙ (see the module docstring) of `counts` against `probabilities` (each > 0, summing
    to 1 within rounding) with the Dirichlet prior k·θ₀, k = `concentration` > 0. 0 for no
    observations. Raises ValueError for mismatched lengths, negative counts, a probability not
    in (0, 1] or not summing to 1, or a concentration that is not finite and > 0."""
    if len(counts) != len(probabilities):
        raise ValueError("counts and probabilities must have the same length")
    if any(c < 0 for c in counts):
        raise ValueError("counts must be >= 0")
    if any(not 0.0 < p <= 1.0 for p in probabilities):
        raise ValueError("probabilities must be in (0, 1]")
    if abs(math.fsum(probabilities) - 1.0) > 1e-9:
        raise ValueError("probabilities must sum to 1")
    if not math.isfinite(concentration) or concentration <= 0:
        raise ValueError(f"concentration must be finite and > 0, got {concentration}")
    n = sum(counts)
    if n == 0:
        return 0.0
    k = concentration
    terms = [math.lgamma(k) - math.lgamma(k + n)]
    for x, p in zip(counts, probabilities, strict=True):
        if x:
            terms.append(math.lgamma(k * p + x) - math.lgamma(k * p) - x * math.log(p))
    return math.fsum(terms)
