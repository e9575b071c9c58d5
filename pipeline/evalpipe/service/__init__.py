"""The embedded reference service: the evaluation service's contract, served on loopback.

evalpipe runs end to end without the real service by starting this one: same endpoints, same
validation (the contract module's), the same rate limits and error shapes, plus faults on
demand; its answers come from a deterministic reference evaluator, not the production model.

    from evalpipe.service import EmbeddedService, ServiceSettings

    with EmbeddedService(ServiceSettings(api_key="k", rpm=600), mode="thread") as service:
        service.base_url          # "http://127.0.0.1:PORT", without /v1
        service.set_limits(rpm=300)
        service.stats()

`evalpipe serve` (evalpipe.service.command) runs it standalone. The Python API's jobs keep the
service they start for the process's next job of the same settings (`kept_service`).
"""

from evalpipe.service.embedded import EmbeddedService
from evalpipe.service.kept import kept_service, kept_services, stop_kept
from evalpipe.service.settings import LimitStep, ServiceSettings, parse_schedule

__all__ = [
    "EmbeddedService",
    "LimitStep",
    "ServiceSettings",
    "kept_service",
    "kept_services",
    "parse_schedule",
    "stop_kept",
]
