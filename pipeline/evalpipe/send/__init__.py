"""Requests out: the HTTP client with its retries, the transports, and the Ray actors that
send on the account's pace.
"""

from evalpipe.send.actors import Job, JobResult
from evalpipe.send.client import CallResult, EvalClient
from evalpipe.send.fleet import Fleet, sizes

__all__ = ["CallResult", "EvalClient", "Fleet", "Job", "JobResult", "sizes"]
