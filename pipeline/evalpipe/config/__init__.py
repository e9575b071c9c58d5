"""A job's config: YAML in, typed and validated settings out, before anything is sent."""

from evalpipe.config.model import (
    DEFAULT_KIND,
    EMBEDDED,
    CacheConfig,
    JobConfig,
    LimitsConfig,
    ServiceConfig,
    TransportKind,
    load_config,
    parse_service,
)
from evalpipe.config.retry import RetryPolicy

__all__ = [
    "DEFAULT_KIND",
    "EMBEDDED",
    "CacheConfig",
    "JobConfig",
    "LimitsConfig",
    "RetryPolicy",
    "ServiceConfig",
    "TransportKind",
    "load_config",
    "parse_service",
]
