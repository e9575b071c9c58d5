"""A job's config: YAML in, typed and validated settings out, before anything is sent.

The plain values a Ray worker receives (RetryPolicy, TransportKind, MAX_RESPONSE_MB, the key's
reader `api_key_in`) load with the package; the pydantic model and the YAML loader on first use
(`evalpipe.lazy`), so a worker never pays for them.
"""

from typing import TYPE_CHECKING

from evalpipe.config.key import api_key_in as api_key_in
from evalpipe.config.retry import RetryPolicy as RetryPolicy
from evalpipe.config.transport import (
    DEFAULT_KIND as DEFAULT_KIND,
    MAX_RESPONSE_MB as MAX_RESPONSE_MB,
    TransportKind as TransportKind,
)
from evalpipe.lazy import lazy_exports

if TYPE_CHECKING:
    from evalpipe.config.endpoints import (
        BASE_URL_PLACEHOLDER as BASE_URL_PLACEHOLDER,
        EMBEDDED as EMBEDDED,
        EMBEDDED_WARNING as EMBEDDED_WARNING,
        MetricsConfig as MetricsConfig,
        ServiceConfig as ServiceConfig,
        origin as origin,
    )
    from evalpipe.config.guards import (
        deadline_at as deadline_at,
        describe_duration as describe_duration,
        parse_deadline as parse_deadline,
        parse_duration as parse_duration,
    )
    from evalpipe.config.load import (
        load_config as load_config,
        parse_config as parse_config,
        parse_service as parse_service,
        with_limits as with_limits,
    )
    from evalpipe.config.model import (
        CacheConfig as CacheConfig,
        JobConfig as JobConfig,
        LimitsConfig as LimitsConfig,
        PackingConfig as PackingConfig,
        PricingConfig as PricingConfig,
        partition_refusal as partition_refusal,
    )

__all__, __getattr__ = lazy_exports(__name__)
