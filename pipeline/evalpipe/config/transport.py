"""Which HTTP library moves a job's bytes, and the most of an answer it reads: plain values the
config holds and the senders read.

Apart from the config's model so that a Ray worker, which receives the kind in its settings,
imports it without pydantic's model of the whole config or the YAML loader.
"""

from __future__ import annotations

from typing import Literal

# The HTTP library that moves the bytes (evalpipe.send.transport builds it): aiohttp's pool
# holds its rate under concurrency where httpx's own does not (bench/RESULTS.md).
TransportKind = Literal["aiohttp", "httpx"]
DEFAULT_KIND: TransportKind = "aiohttp"
# The largest answer body read, in megabytes (`service.max_response_mb`'s default): the largest
# pack of the largest questions answers in well under 1 MB.
MAX_RESPONSE_MB = 8.0
