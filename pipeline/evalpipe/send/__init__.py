"""Requests out: the connection to the service (its key, the embedded service, the first
contact), the HTTP client with its retries, the transports, and the Ray actors that send on the
account's pace.

The fleet (the driver's side, with the config's model and the account's Budget) and the
connection load on first use (`evalpipe.lazy`): a Ray worker imports this package for its actor
class alone.
"""

from typing import TYPE_CHECKING

from evalpipe.lazy import lazy_exports
from evalpipe.send.actors import Job, JobResult
from evalpipe.send.client import CallResult, EvalClient
from evalpipe.send.diagnosis import CAUSES
from evalpipe.send.packs import Pack, pack_payload

if TYPE_CHECKING:
    from evalpipe.send.connect import (
        INTERACTIVE_POLICY,
        Connection,
        api_key,
        list_models,
        service_url,
    )
    from evalpipe.send.fleet import Fleet, sizes

__all__ = [
    "CAUSES",
    "INTERACTIVE_POLICY",
    "CallResult",
    "Connection",
    "EvalClient",
    "Fleet",
    "Job",
    "JobResult",
    "Pack",
    "api_key",
    "list_models",
    "pack_payload",
    "service_url",
    "sizes",
]

__getattr__ = lazy_exports(
    __name__,
    {
        "evalpipe.send.connect": (
            "INTERACTIVE_POLICY",
            "Connection",
            "api_key",
            "list_models",
            "service_url",
        ),
        "evalpipe.send.fleet": ("Fleet", "sizes"),
    },
)
