"""What an exchange cost, from the model's price table and the usage it reported."""

from __future__ import annotations

from proxy.config import PriceSpec

from .records import Usage

_PER_TOKEN = 1e-6


def cost_usd(usage: Usage, price: PriceSpec) -> float:
    """USD for one exchange.

    Cached input is billed at `cached_input_per_mtok` (default: the input price) and cache writes
    at `cache_write_per_mtok` (default: the input price). Reasoning tokens are part of the output
    tokens; they are billed apart only when `reasoning_per_mtok` is set.
    """
    cached = price.cached_input_per_mtok
    write = price.cache_write_per_mtok
    reasoning = price.reasoning_per_mtok
    output = usage.output_tokens
    total = usage.input_tokens * price.input_per_mtok
    total += usage.cached_input_tokens * (price.input_per_mtok if cached is None else cached)
    total += usage.cache_write_tokens * (price.input_per_mtok if write is None else write)
    if reasoning is not None:
        total += usage.reasoning_tokens * reasoning
        output -= usage.reasoning_tokens
    total += output * price.output_per_mtok
    return total * _PER_TOKEN
