"""Requests out: the connection to the service (its key, the embedded service, the first
contact), the HTTP client with its retries, the transports, and the Ray actors that send on the
account's pace. Whatever sends a request builds its body with `request_body`.

The fleet (the driver's side, with the config's model and the account's Budget) and the
connection load on first use (`evalpipe.lazy`): a Ray worker imports this package for its actor
class alone.
"""

from typing import TYPE_CHECKING

from evalpipe.lazy import lazy_exports
from evalpipe.send.client import CallResult as CallResult, EvalClient as EvalClient
from evalpipe.send.diagnosis import CAUSES as CAUSES
from evalpipe.send.packs import Pack as Pack, pack_payload as pack_payload
from evalpipe.send.work import (
    JobResult as JobResult,
    StateJob as StateJob,
    request_body as request_body,
)

if TYPE_CHECKING:
    from evalpipe.send.connect import (
        INTERACTIVE_POLICY as INTERACTIVE_POLICY,
        Connection as Connection,
        api_key as api_key,
        list_models as list_models,
        service_url as service_url,
    )
    from evalpipe.send.fleet import Fleet as Fleet, sizes as sizes

__all__, __getattr__ = lazy_exports(__name__)
