"""A job's config: YAML in, typed and validated settings out, before anything is sent.

The plain values a Ray worker receives (RetryPolicy, TransportKind) load with the package; the
pydantic model and the YAML loader on first use (`evalpipe.lazy`), so a worker never pays
for them.
"""

from typing import TYPE_CHECKING

from evalpipe.config.retry import RetryPolicy
from evalpipe.config.transport import DEFAULT_KIND, TransportKind
from evalpipe.lazy import lazy_exports

if TYPE_CHECKING:
    from evalpipe.config.guards import (
        deadline_at,
        describe_duration,
        parse_deadline,
        parse_duration,
    )
    from evalpipe.config.load import load_config, parse_config, parse_service, with_limits
    from evalpipe.config.model import (
        BASE_URL_PLACEHOLDER,
        EMBEDDED,
        EMBEDDED_WARNING,
        CacheConfig,
        JobConfig,
        LimitsConfig,
        MetricsConfig,
        PackingConfig,
        PricingConfig,
        ServiceConfig,
        origin,
    )

__all__ = [
    "BASE_URL_PLACEHOLDER",
    "DEFAULT_KIND",
    "EMBEDDED",
    "EMBEDDED_WARNING",
    "CacheConfig",
    "JobConfig",
    "LimitsConfig",
    "MetricsConfig",
    "PackingConfig",
    "PricingConfig",
    "RetryPolicy",
    "ServiceConfig",
    "TransportKind",
    "deadline_at",
    "describe_duration",
    "load_config",
    "origin",
    "parse_config",
    "parse_deadline",
    "parse_duration",
    "parse_service",
    "with_limits",
]

__getattr__ = lazy_exports(
    __name__,
    {
        "evalpipe.config.guards": (
            "deadline_at",
            "describe_duration",
            "parse_deadline",
            "parse_duration",
        ),
        "evalpipe.config.load": ("load_config", "parse_config", "parse_service", "with_limits"),
        "evalpipe.config.model": (
            "BASE_URL_PLACEHOLDER",
            "EMBEDDED",
            "EMBEDDED_WARNING",
            "CacheConfig",
            "JobConfig",
            "LimitsConfig",
            "MetricsConfig",
            "PackingConfig",
            "PricingConfig",
            "ServiceConfig",
            "origin",
        ),
    },
)
