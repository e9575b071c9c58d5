"""The run's telemetry (`evalpipe.observe`), fed from the job's one bookkeeping: the counters.

`observed` starts the run's `Telemetry` with what the run is (its id, job name, output, model,
limits, and the corpus and table for lineage) and ends it if the run fails or is stopped at
once; `sample` is the counters as the metrics read them, taken by the driver a few times a
second (`evalpipe.engine.progress.Progress`); `canary_checked` records the canary's result
before the corpus is sent.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator, Mapping
from typing import Any

from evalpipe.engine.events import EventLog
from evalpipe.engine.progress import Counters
from evalpipe.engine.stopping import StopNow
from evalpipe.errors import CanaryFailed
from evalpipe.observe import (
    Datasets as Datasets,  # the engine's word for it too
    RunFacts,
    Sample,
    Telemetry,
)
from evalpipe.planning import PreparedJob
from evalpipe.stores import shown


def sample(c: Counters) -> Sample:
    """The counters as the run's metrics read them (`evalpipe.observe`)."""
    from_elsewhere = c.rows_from_cache + c.reused  # rows answered without a request of theirs
    return Sample(
        time=time.monotonic(),
        rows_total=c.rows_total,
        rows_skipped=c.rows_skipped,
        rows_done=c.rows_done,
        rows_answered=max(0, c.answered - from_elsewhere),
        rows_from_cache=c.rows_from_cache,
        rows_reused=c.reused,
        rows_in_error=dict(c.errors),
        requests_answered=c.requests - c.requests_failed - c.refused_for_length,
        requests_failed=c.requests_failed,
        requests_refused_for_length=c.refused_for_length,
        attempts=c.attempts,
        retries=c.retries,
        rate_limited=c.rate_limited,
        input_tokens=c.input_tokens,
        cost_usd=c.price.cost(c.input_tokens),
        cache_hits=c.questions_from_cache,
        cache_saved_tokens=c.cache_saved_tokens,
        eta_seconds=c.eta(),
    )


def datasets_of(prepared: PreparedJob) -> Datasets:
    """What the run reads and writes, for lineage: the corpus and the table, their schemas
    and the corpus's rows (the run's own events, or a scheduler's, `evalpipe.session.scheduled`)."""
    config, source = prepared.config, prepared.source
    return Datasets(
        config.input.path, source.schema, source.num_rows, config.output.path, prepared.schema
    )


@contextlib.contextmanager
def observed(
    prepared: PreparedJob, run_id: str, name: str | None, log: EventLog, lineage: bool = True
) -> Iterator[Telemetry]:
    """The run's telemetry, ended as the run ends: stopped by a second signal, or failed with
    its error (a run that ends otherwise closes it itself, with its figures). `lineage=False`:
    no OpenLineage events of the run's own (its caller sends them)."""
    config = prepared.config
    limits = config.limits
    run = RunFacts(
        run_id, name or config.name or "evalpipe", shown(config.output.path), config.model,
        config.service.identity, limits.requests_per_minute, limits.tokens_per_second,
    )  # fmt: skip
    datasets = datasets_of(prepared)
    watch = Telemetry(
        run,
        config.metrics,
        datasets if lineage else None,
        log.warning,
        lambda text, url: log.emit("metrics", text, url=url),
    )
    try:
        yield watch
    except StopNow:
        watch.close("stopped")
        raise
    except BaseException as exc:
        watch.close("failed", error=exc)
        raise
    finally:
        watch.close("failed")  # no-op when closed already


def canary_checked(
    canary: Callable[[str], Mapping[str, Any] | None] | None,
    run_id: str,
    watch: Telemetry,
    log: EventLog,
) -> dict[str, Any] | None:
    """The canary's result (None without one), recorded in the run's telemetry and log (its
    `canary` event); CanaryFailed when it failed."""
    if canary is None:
        return None
    watch.begin("canary")
    found = canary(run_id)
    if found is None:
        return None
    result = dict(found)
    watch.canary(result)
    log.emit("canary", result["text"], **{k: v for k, v in result.items() if k != "text"})
    if not result["passed"]:
        raise CanaryFailed(result["message"])
    return result
