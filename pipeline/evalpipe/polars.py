"""A polars expression namespace that scores a column, on `ep.score`'s own engine.

    import polars as pl
    import evalpipe as ep
    import evalpipe.polars  # registers `.evalpipe` on every expression

    service = ep.Service("https://evals.example.com", model="model-1.13.0")
    scored = (
        pl.scan_parquet("reviews.parquet")
        .with_columns(
            helpful=pl.col("text").evalpipe.noul(ep.Noul("Helps a shopper?"), service=service),
            answers=pl.col("text").evalpipe.ask(
                {"sentiment": ep.Choice("Sentiment?", ["positive", "negative"]),
                 "quality": ep.Score("How well written?", ["poor", "fair", "good"])},
                service=service,
            ),
        )
        .collect()
    )

`noul` gives the probability of yes (Float64); `choice` a struct (`choice`, `confidence`, `p`: a
struct of the options' probabilities, named as the output table's `K__p__<name>` columns);
`score` the same with `score`; `ask` a struct with a field per key (each answer as above) and
`_error` ("<error type>: <sentence>" where the service could not answer a row). Every question of
one `ask` is answered from one request per distinct state, so ask several questions of a column
with `ask`, not with one expression each (each is a job, and a request per state, of its own).

The job runs on the thread polars calls the expression on (one of its pool's, or the caller's),
never waiting for another thread: polars work the job does meanwhile needs that pool.

The column is text (a string state) or a struct (an object state: `pl.struct("title", "body")`);
a null state is not sent and answers null. Rows keep their order, on a DataFrame as on a
LazyFrame. The expression sees the whole column at once (`map_batches`, not elementwise: never
one job per small batch), which becomes one `ep.score` job on its distinct states
(`evalpipe.api.answer_column`): the account's budget, the answer cache (the same pipeline again
sends nothing), the contract checked before anything is sent.

This module is `evalpipe.polars`; the `import polars` below is the library (absolute imports).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import polars as pl

from evalpipe.api import Choice, Noul, Score, Service, answer_column, answer_dtype
from evalpipe.errors import ConfigError

__all__ = ["EvalpipeNamespace"]

NAMESPACE = "evalpipe"


@pl.api.register_expr_namespace(NAMESPACE)
class EvalpipeNamespace:
    """`pl.col(...).evalpipe`: the column's states scored by `service` (an `ep.Service`).
    `progress`: as for `ep.score`."""

    def __init__(self, expr: pl.Expr) -> None:
        self._expr = expr

    def noul(self, question: Noul | str, *, service: Service, progress: Any = True) -> pl.Expr:
        """The probability of yes (Float64) for a yes/no question (an `ep.Noul`, or its
        instructions)."""
        asked = question if isinstance(question, Noul) else Noul(question)
        return self._answer("q", asked, service, progress)

    def choice(self, question: Choice, *, service: Service, progress: Any = True) -> pl.Expr:
        """The chosen option, its confidence and each option's probability (a struct)."""
        return self._answer("q", _of(question, Choice, "choice"), service, progress)

    def score(self, question: Score, *, service: Service, progress: Any = True) -> pl.Expr:
        """The expected level, its confidence and each level's probability (a struct)."""
        return self._answer("q", _of(question, Score, "score"), service, progress)

    def ask(
        self, questions: Mapping[str, Noul | Choice | Score], *, service: Service,
        progress: Any = True,
    ) -> pl.Expr:  # fmt: skip
        """Every question of `questions` (key -> `ep.Noul`, `ep.Choice` or `ep.Score`) from
        one request per distinct state: a struct with a field per key and `_error`."""
        dtype = answer_dtype(questions)  # the questions checked here, before anything runs
        service = _service(service)

        def scored(states: pl.Series) -> pl.Series:
            return answer_column(states, questions, service, progress=progress, here=True)

        return self._expr.map_batches(scored, return_dtype=dtype)

    def _answer(self, key: str, question: Any, service: Service, progress: Any) -> pl.Expr:
        asked = {key: question}
        service = _service(service)
        dtype = answer_dtype(asked).to_schema()[key]

        def scored(states: pl.Series) -> pl.Series:
            answers = answer_column(states, asked, service, progress=progress, here=True)
            return answers.struct.field(key).alias(states.name)

        return self._expr.map_batches(scored, return_dtype=dtype)


def _of(question: Any, kind: type, name: str) -> Any:
    if not isinstance(question, kind):
        raise ConfigError(f"{name}: give an ep.{kind.__name__}, not {type(question).__name__}")
    return question


def _service(service: Any) -> Service:
    if not isinstance(service, Service):
        raise ConfigError(f"service: a {type(service).__name__}; give an ep.Service")
    return service
