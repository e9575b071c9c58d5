"""A job's config: YAML in, typed and validated settings out, before anything is sent."""

from evalpipe.config.load import load_config, parse_config, parse_service
from evalpipe.config.model import (
    DEFAULT_KIND,
    EMBEDDED,
    CacheConfig,
    JobConfig,
    LimitsConfig,
    PricingConfig,
    ServiceConfig,
    TransportKind,
    origin,
)
from evalpipe.config.retry import RetryPolicy

__all__ = [
    "DEFAULT_KIND",
    "EMBEDDED",
    "CacheConfig",
    "JobConfig",
    "LimitsConfig",
    "PricingConfig",
    "RetryPolicy",
    "ServiceConfig",
    "TransportKind",
    "load_config",
    "origin",
    "parse_config",
    "parse_service",
]
