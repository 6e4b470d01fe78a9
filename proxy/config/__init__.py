"""Configuration: YAML in, frozen pydantic specs out, or every problem named by its key path.
`specs` holds the sections, `loader` reads YAML into them, `checks` holds one cross-check per
section, `errors` the one error. The bottom layer: imports nothing of the gateway (only
`analyzers`, for check and agreement specs).
"""

from .errors import ConfigError
from .loader import load_config, parse_config
from .specs import (
    JudgeSpec,
    MirrorgateConfig,
    ModelSpec,
    PriceSpec,
    RollbackTarget,
    RouteSpec,
    RuleSpec,
    ShadowSpec,
    StoreSpec,
    TelemetrySpec,
    agreement_spec,
)

__all__ = [
    "ConfigError",
    "JudgeSpec",
    "MirrorgateConfig",
    "ModelSpec",
    "PriceSpec",
    "RollbackTarget",
    "RouteSpec",
    "RuleSpec",
    "ShadowSpec",
    "StoreSpec",
    "TelemetrySpec",
    "agreement_spec",
    "load_config",
    "parse_config",
]
