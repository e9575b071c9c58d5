"""A job's config: YAML in, typed and validated settings out, before anything is sent."""

from evalpipe.config.load import load_config, parse_config, parse_service
from evalpipe.config.model import (
    BASE_URL_PLACEHOLDER,
    DEFAULT_KIND,
    EMBEDDED,
    EMBEDDED_WARNING,
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
    "BASE_URL_PLACEHOLDER",
    "DEFAULT_KIND",
    "EMBEDDED",
    "EMBEDDED_WARNING",
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
