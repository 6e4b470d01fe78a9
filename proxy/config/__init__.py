"""Configuration: YAML in, frozen pydantic specs out, or every problem named by its key path.
The bottom layer: imports nothing of the gateway (only `analyzers`, for check and agreement
specs).
"""

from .specs import (
    ConfigError,
    JudgeSpec,
    MirrorgateConfig,
    ModelSpec,
    PriceSpec,
    RouteSpec,
    RuleSpec,
    ShadowSpec,
    StoreSpec,
    TelemetrySpec,
    agreement_spec,
    load_config,
    parse_config,
)

__all__ = [
    "ConfigError",
    "JudgeSpec",
    "MirrorgateConfig",
    "ModelSpec",
    "PriceSpec",
    "RouteSpec",
    "RuleSpec",
    "ShadowSpec",
    "StoreSpec",
    "TelemetrySpec",
    "agreement_spec",
    "load_config",
    "parse_config",
]
