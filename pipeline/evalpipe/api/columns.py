"""A column of states in, a column of answers out: what the SQL and DataFrame front ends share.

`evalpipe.duckdb`'s SQL functions and `evalpipe.polars`' expressions hand over a column (a
batch of states) and want one answer per value, in order. Rather than a second engine, each
column becomes one `ep.score` job (`evalpipe.api.run`): its distinct non-null states, numbered,
are the job's rows, so the account's budget, the answer cache, the kept output (the same column
again sends nothing and returns at once), the contract checked before sending and the kept token
ratio hold as for `ep.score`, and every question of a call is asked in one request per distinct
state. The answers are then spread back over the column's rows, in its order; a null state is
not sent and answers null.

An answer per question key: a yes/no question's is the probability of yes (Float64); a choice's
a struct (`choice`, `confidence`, `p`: a struct of probabilities named as the output table's
`K__p__<name>` columns are); a score's the same with `score` for `choice`. A row the service
could not answer has null answers and says why in `_error` ("<error type>: <sentence>").

The jobs run on threads of evalpipe's own that live as long as the process (`_PUMP`): a Ray a
job starts there stays up for the next one (a Ray started on a query engine's worker thread
would die with that thread: its processes are bound to the thread that started them). Two jobs
run at once (`JOBS_AT_ONCE`), so that batches a query engine hands over from its threads keep
requests flowing: while one job waits for its last answers, the next one sends, both paced by
the account's one budget (bench/sql_rpm.py: 96% of the rate in 200-row batches, 92% one at a
time). Where the caller is the main thread, an interrupt stops the job as it stops `ep.score`.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import threading
from collections.abc import Mapping
from typing import Any

import polars as pl

from evalpipe.api.call import Questions
from evalpipe.api.questions import Choice, Noul, Score, Service, question_dicts
from evalpipe.api.run import interrupt_asks, score_frame
from evalpipe.engine import StopSignals
from evalpipe.errors import ConfigError, InputError
from evalpipe.output import safe_names
from evalpipe.session import display_for

ID = "_evalpipe_state"  # the job's id column: the number of a distinct state
STATE = "_evalpipe_text"  # the job's state column, for a string state
ERROR = "_error"  # "<error type>: <sentence>" for a row the service could not answer

# Threads for the life of the process run the columns' jobs (module docstring): two, so that
# while one job waits for its last answers the next batch's requests already flow.
JOBS_AT_ONCE = 2
_PUMP = concurrent.futures.ThreadPoolExecutor(JOBS_AT_ONCE, thread_name_prefix="evalpipe-column")
_RAY_STARTING = threading.Lock()  # the first jobs take turns: one of them starts Ray


def answer_dtype(questions: Questions) -> pl.Struct:
    """The polars type of `answer_column`'s result: a field per question key, then `_error`."""
    fields = {key: _dtype(q) for key, q in _objects(questions).items()}
    return pl.Struct({**fields, ERROR: pl.String})


def answer_column(
    states: pl.Series,
    questions: Questions,
    service: Service,
    *,
    progress: Any = False,
    here: bool = False,
) -> pl.Series:
    """One answer struct per value of `states` (`answer_dtype`), in order: a column of text
    (string states) or of structs (object states) scored by one job. Bad input (an empty
    `questions`, a column of another type) is an evalpipe error before anything is sent.
    `here`: the job runs on the calling thread, not the pump's: a polars expression's (its
    function runs on a thread of polars' own pool, which lives as long as the process; had it
    waited for a pump thread, the job's own polars work could find that pool's every thread
    waiting, and never run)."""
    asked = _objects(questions)
    kind = _state_kind(states)
    frame = pl.DataFrame({"state": states})
    distinct = frame.filter(pl.col("state").is_not_null()).unique(maintain_order=True)
    distinct = distinct.with_row_index(ID).with_columns(pl.col(ID).cast(pl.Int64))
    dtype = answer_dtype(asked)
    if distinct.height == 0:
        return pl.Series(states.name, [None] * states.len(), dtype=dtype)
    data, state = _job_input(distinct, kind)
    table = _run_on_pump(data, state, asked, service, progress, here)
    answers = distinct.select(ID, "state").join(
        table.select(ID, _answers(asked, table).alias("answers")), on=ID, how="left"
    )
    back = frame.join(answers, on="state", how="left", maintain_order="left")  # nulls: no match
    return back["answers"].alias(states.name).cast(dtype)


def _objects(questions: Questions) -> dict[str, Noul | Choice | Score]:
    """The questions as the API's objects (a plain dict is checked as a config's is)."""
    if not isinstance(questions, Mapping) or not questions:
        raise ConfigError("questions: give at least one question (a key and its question)")
    out: dict[str, Noul | Choice | Score] = {}
    for key, question in question_dicts(questions).items():
        kind = question.get("type")
        criteria = question.get("criteria")
        instructions = question.get("instructions", "")
        if kind == "noul":
            given = criteria if isinstance(criteria, Mapping) else {}
            out[key] = Noul(instructions, true=given.get("true"), false=given.get("false"))
        elif kind == "choice":
            out[key] = Choice(instructions, criteria if criteria is not None else [])
        elif kind == "score":
            out[key] = Score(instructions, criteria if criteria is not None else [])
        else:
            raise ConfigError(f"questions.{key}.type: {kind!r}; give noul, choice or score")
    return out


def _dtype(question: Noul | Choice | Score) -> pl.DataType:
    if isinstance(question, Noul):
        return pl.Float64()
    labels = _labels(question)
    probabilities = pl.Struct(dict.fromkeys(safe_names(labels), pl.Float64))
    head = "choice" if isinstance(question, Choice) else "score"
    value = pl.String() if head == "choice" else pl.Float64()
    return pl.Struct({head: value, "confidence": pl.Float64, "p": probabilities})


def _labels(question: Choice | Score) -> list[str]:
    if isinstance(question, Score):
        return list(question.levels)
    options = question.options
    return list(options.keys() if isinstance(options, Mapping) else options)


def _state_kind(states: pl.Series) -> str:
    if states.dtype == pl.String:
        return "text"
    if isinstance(states.dtype, pl.Struct) and states.dtype.fields:
        return "object"
    raise InputError(
        f"state: a column of {states.dtype}; give text (a string state) or a struct of named "
        "fields (an object state)"
    )


def _job_input(distinct: pl.DataFrame, kind: str) -> tuple[pl.DataFrame, str | list[str]]:
    """The job's rows (its id and state columns) and its `state` setting."""
    if kind == "text":
        return distinct.select(ID, pl.col("state").alias(STATE)), STATE
    fields = distinct.select(pl.col("state").struct.unnest())
    if ID in fields.columns:
        raise InputError(f"state: the field name {ID} is evalpipe's own; rename the field")
    return pl.concat([distinct.select(ID), fields], how="horizontal"), fields.columns


def _run_on_pump(
    data: pl.DataFrame,
    state: str | list[str],
    questions: dict[str, Noul | Choice | Score],
    service: Service,
    progress: Any,
    here: bool = False,
) -> pl.DataFrame:
    """`ep.score`'s job for these rows, run on the pump thread while the caller waits (or,
    `here`, on the caller's)."""
    stop = StopSignals(cancel=True)
    display = display_for(progress)
    if here:
        with interrupt_asks(stop):
            result: pl.DataFrame = _job(stop, data, state, questions, service, display)
            return result
    job = _PUMP.submit(_job, stop, data, state, questions, service, display)
    with interrupt_asks(stop):  # in the main thread, an interrupt stops the job
        try:
            return job.result()
        except KeyboardInterrupt:
            stop.ask()
            concurrent.futures.wait([job])
            raise


def _job(stop: StopSignals, data: pl.DataFrame, state: str | list[str], *options: Any) -> Any:
    """`ep.score`'s job on a pump thread; alone while Ray is not up yet (two jobs would each
    start one)."""
    import ray

    with contextlib.nullcontext() if ray.is_initialized() else _RAY_STARTING:
        questions, service, display = options
        return score_frame(stop, data, ID, state, questions, service, None, display)


def _answers(questions: dict[str, Noul | Choice | Score], table: pl.DataFrame) -> pl.Expr:
    """The output table's answer columns of each row as one struct (module docstring)."""
    fields = [_answer(key, q).alias(key) for key, q in questions.items()]
    error = pl.when(pl.col("_error_type").is_not_null()).then(
        pl.format("{}: {}", pl.col("_error_type"), pl.col("_error").fill_null(""))
    )
    return pl.struct([*fields, error.alias(ERROR)])


def _answer(key: str, question: Noul | Choice | Score) -> pl.Expr:
    if isinstance(question, Noul):
        return pl.col(f"{key}__p_true")
    names = safe_names(_labels(question))
    p = pl.struct([pl.col(f"{key}__p__{name}").alias(name) for name in names])
    head = "choice" if isinstance(question, Choice) else "score"
    return pl.struct(
        pl.col(f"{key}__{head}").alias(head), pl.col(f"{key}__confidence").alias("confidence"),
        p.alias("p"),
    )  # fmt: skip
