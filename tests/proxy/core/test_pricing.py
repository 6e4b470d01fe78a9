"""Cost arithmetic: every token priced once, at its own price."""

from __future__ import annotations

import pytest

from proxy.config.specs import PriceSpec
from proxy.core.pricing import cost_usd
from proxy.core.records import Usage


def test_each_token_type_has_its_price() -> None:
    price = PriceSpec(
        input_per_mtok=3.0,
        output_per_mtok=15.0,
        cached_input_per_mtok=0.3,
        cache_write_per_mtok=3.75,
        reasoning_per_mtok=60.0,
    )
    usage = Usage(
        input_tokens=1000,
        output_tokens=500,
        cached_input_tokens=2000,
        cache_write_tokens=100,
        reasoning_tokens=200,
    )
    expected = (1000 * 3.0 + 2000 * 0.3 + 100 * 3.75 + 200 * 60.0 + 300 * 15.0) / 1e6
    assert cost_usd(usage, price) == pytest.approx(expected, rel=1e-12)


def test_defaults_fall_back_to_input_and_output_prices() -> None:
    price = PriceSpec(input_per_mtok=1.0, output_per_mtok=4.0)
    usage = Usage(input_tokens=10, output_tokens=5, cached_input_tokens=20, reasoning_tokens=3)
    # cached input at the input price; reasoning is part of the output, billed once
    assert cost_usd(usage, price) == pytest.approx((10 + 20) * 1e-6 + 5 * 4e-6, rel=1e-12)


def test_no_price_costs_nothing() -> None:
    assert cost_usd(Usage(input_tokens=10**6, output_tokens=10**6), PriceSpec()) == 0.0
