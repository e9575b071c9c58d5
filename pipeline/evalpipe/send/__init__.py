"""Requests out: the HTTP client with its retries, the transports, and the Ray actors that
send on the account's pace. Whatever sends a request builds its body with `request_body`.

The fleet (the driver's side, with the config's model and the account's Budget) loads on first
use (`evalpipe.lazy`): a Ray worker imports this package for its actor class alone.
"""

from typing import TYPE_CHECKING

from evalpipe.lazy import lazy_exports
from evalpipe.send.client import CallResult, EvalClient
from evalpipe.send.diagnosis import CAUSES
from evalpipe.send.packs import Pack, pack_payload
from evalpipe.send.work import Job, JobResult, request_body

if TYPE_CHECKING:
    from evalpipe.send.fleet import Fleet, sizes

__all__ = [
    "CAUSES",
    "CallResult",
    "EvalClient",
    "Fleet",
    "Job",
    "JobResult",
    "Pack",
    "pack_payload",
    "request_body",
    "sizes",
]

__getattr__ = lazy_exports(__name__, {"evalpipe.send.fleet": ("Fleet", "sizes")})
