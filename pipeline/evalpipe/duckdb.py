"""SQL functions on a DuckDB connection that score a column, on `ep.score`'s own engine.

    import duckdb
    import evalpipe as ep
    import evalpipe.duckdb

    con = duckdb.connect()
    evalpipe.duckdb.register(con, service=ep.Service("https://evals.example.com", "model-1.13.0"))
    con.sql(\"\"\"
        SELECT review_id,
               evalpipe_noul(text, 'Does the review help a shopper decide?') AS helpful,
               evalpipe_choice(text, 'Overall sentiment?', ['positive', 'mixed', 'negative'])
                   .choice AS sentiment
        FROM read_parquet('reviews.parquet')
    \"\"\")

The functions (`register` adds them to one connection; each takes the state first):

- `evalpipe_noul(state, instructions [, true, false])` -> DOUBLE, the probability of yes;
- `evalpipe_choice(state, instructions, options)` -> STRUCT(choice VARCHAR, confidence DOUBLE,
  p STRUCT(<option> DOUBLE, ...)); `options` a list of names, or a MAP or STRUCT of names to
  what each means (or JSON text of either);
- `evalpipe_score(state, instructions, levels)` -> STRUCT(score DOUBLE, confidence DOUBLE,
  p STRUCT(<level> DOUBLE, ...)); `levels` a list, lowest first;
- `evalpipe_ask(state, questions)` -> STRUCT(<key> <answer>, ..., _error VARCHAR): every
  question of `questions` answered from one request per distinct state. `questions` is the job
  config's `questions` map as JSON text (`'{"helpful": {"type": "noul", "instructions": ...}}'`),
  or a STRUCT (or MAP) of such questions, each a STRUCT or JSON, written out or built by
  `evalpipe_noul_question(instructions [, true, false])`, `evalpipe_choice_question(instructions,
  options)` or `evalpipe_score_question(instructions, levels)`. A key's answer is what the
  function of its type returns; `_error` says why a row has no answers ("<type>: <sentence>").

`state` is text (VARCHAR: a string state), a STRUCT (an object state: `{'title': title, 'body':
body}`), or JSON holding an object. A NULL state is not sent and answers NULL, as does a row the
service could not answer. The probabilities in `p` are named as the output table's
`K__p__<name>` columns (`evalpipe.output.safe_names`: `Very good` -> `very_good`).

Each batch DuckDB hands a function (up to 2,048 rows) is one `ep.score` job on its distinct
states (`evalpipe.api.answer_column`): the account's budget, the answer cache (the same query
again sends nothing), the contract checked before anything is sent. The questions are the
query's constants; a bad one is a DuckDB error carrying evalpipe's one line (`ConfigError:
evalpipe_choice: criteria: at least 1 option ...`), raised while DuckDB binds the query, before
any row is read. `evalpipe_choice`, `evalpipe_score` and `evalpipe_ask` are SQL macros: the
answer's type follows the options, levels and keys, so each builds it at bind time with
`from_json` from a shape the question gives, around a Python function that returns the
answers as JSON.

This module is `evalpipe.duckdb`; the `import duckdb` below is the library (absolute imports).
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

import duckdb
import polars as pl
import pyarrow as pa

from evalpipe.api import Choice, Noul, Score, Service, answer_column, answer_dtype
from evalpipe.errors import ConfigError, InputError

__all__ = ["FUNCTIONS", "register"]

FUNCTIONS = ("evalpipe_noul", "evalpipe_choice", "evalpipe_score", "evalpipe_ask")
QUESTION_MACROS = ("evalpipe_noul_question", "evalpipe_choice_question", "evalpipe_score_question")
Q = TypeVar("Q", Noul, Choice, Score)

# The SQL the functions are: macros around the Python functions (named `__evalpipe_*`).
# `typeof(state)` tells a JSON state from text; `from_json` gives the answer its type.
_MACROS = """
CREATE OR REPLACE TEMP MACRO evalpipe_noul(state, instructions) AS
    __evalpipe_noul(state, typeof(state), instructions, NULL, NULL),
  (state, instructions, t, f) AS
    __evalpipe_noul(state, typeof(state), instructions, t, f);
CREATE OR REPLACE TEMP MACRO evalpipe_choice(state, instructions, options) AS
    from_json(__evalpipe_choice(state, typeof(state), instructions, options),
              __evalpipe_choice_shape(instructions, options));
CREATE OR REPLACE TEMP MACRO evalpipe_score(state, instructions, levels) AS
    from_json(__evalpipe_score(state, typeof(state), instructions, levels),
              __evalpipe_score_shape(instructions, levels));
CREATE OR REPLACE TEMP MACRO evalpipe_ask(state, questions) AS
    from_json(__evalpipe_ask(state, typeof(state), questions), __evalpipe_ask_shape(questions));
CREATE OR REPLACE TEMP MACRO evalpipe_noul_question(instructions) AS
    json_object('type', 'noul', 'instructions', instructions),
  (instructions, t, f) AS
    json_object('type', 'noul', 'instructions', instructions,
                'criteria', json_object('true', t, 'false', f));
CREATE OR REPLACE TEMP MACRO evalpipe_choice_question(instructions, options) AS
    json_object('type', 'choice', 'instructions', instructions, 'criteria', options);
CREATE OR REPLACE TEMP MACRO evalpipe_score_question(instructions, levels) AS
    json_object('type', 'score', 'instructions', instructions, 'criteria', levels);
"""


def register(
    con: duckdb.DuckDBPyConnection, *, service: Service, progress: Any = True
) -> duckdb.DuckDBPyConnection:
    """Add the `evalpipe_*` SQL functions (module docstring) to the connection `con`, answered
    by `service` (an `ep.Service`). `progress`: as for `ep.score` (a bar per batch while it is
    scored; False for none). Registering again replaces them (another service, say). Returns
    `con`."""
    if not isinstance(service, Service):
        raise ConfigError(f"service: a {type(service).__name__}; give an ep.Service")
    udfs: dict[str, tuple[Callable[..., Any], str]] = {
        "__evalpipe_noul": (_Batch(service, progress, "evalpipe_noul").noul, "DOUBLE"),
        "__evalpipe_choice": (_Batch(service, progress, "evalpipe_choice").choice, "VARCHAR"),
        "__evalpipe_score": (_Batch(service, progress, "evalpipe_score").score, "VARCHAR"),
        "__evalpipe_ask": (_Batch(service, progress, "evalpipe_ask").ask, "VARCHAR"),
        "__evalpipe_choice_shape": (_choice_shape, "VARCHAR"),
        "__evalpipe_score_shape": (_score_shape, "VARCHAR"),
        "__evalpipe_ask_shape": (_ask_shape, "VARCHAR"),
    }
    for name, (function, returns) in udfs.items():
        with contextlib.suppress(duckdb.Error):  # not registered yet
            con.remove_function(name)
        # Arrow batches; nulls handed over (a null state answers null; null criteria are
        # absent ones). The strings name the enums of every DuckDB version (1.x: duckdb.
        # functional, 2.x: duckdb.func), which the stubs do not take for them.
        con.create_function(  # type: ignore[call-overload]
            name, function, None, returns, type="arrow", null_handling="special"
        )
    con.execute(_MACROS)
    return con


# --------------------------------------------------------------------------- the questions


def _constant(values: pa.ChunkedArray | pa.Array, what: str, function: str) -> Any:
    """The one value a question's argument takes in a batch (the query's constant)."""
    seen = {json.dumps(v, sort_keys=True, default=str): v for v in values.to_pylist()}
    if len(seen) > 1:
        raise ConfigError(f"{function}: {what} differs between rows; give the query's constant")
    return next(iter(seen.values()), None)


def _checked(function: str, make: Callable[[], Q]) -> Q:
    """The question `make` builds; its ConfigError names the function."""
    try:
        return make()
    except ConfigError as exc:
        raise ConfigError(f"{function}: {exc.message}") from None
    except TypeError as exc:
        raise ConfigError(f"{function}: {exc}") from None


def _text(value: Any, what: str, function: str) -> str:
    if not isinstance(value, str):
        raise ConfigError(f"{function}: {what} must be text, not {type(value).__name__}")
    return value


def _options(value: Any, function: str) -> list[str] | dict[str, str | None]:
    """Options or levels as SQL gives them: a LIST, a MAP (pairs), a STRUCT (a dict), or JSON
    text of a list or an object."""
    if value is None:
        return []
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except ValueError:
            raise ConfigError(f"{function}: options given as text must be JSON") from None
    if isinstance(value, dict):
        return dict(value)
    if isinstance(value, list) and value and all(isinstance(v, tuple) for v in value):
        return dict(value)  # a MAP comes as (key, value) pairs
    if isinstance(value, list):
        return [str(v) for v in value]
    raise ConfigError(f"{function}: give the options as a list, a MAP or a STRUCT of names")


def _noul(instructions: Any, true: Any, false: Any) -> Noul:
    function = "evalpipe_noul"
    text = _text(instructions, "instructions", function)
    return _checked(function, lambda: Noul(text, true=true, false=false))


def _choice(instructions: Any, options: Any) -> Choice:
    function = "evalpipe_choice"
    text, given = _text(instructions, "instructions", function), _options(options, function)
    return _checked(function, lambda: Choice(text, given))


def _score(instructions: Any, levels: Any) -> Score:
    function = "evalpipe_score"
    text, given = _text(instructions, "instructions", function), _options(levels, function)
    if isinstance(given, dict):
        raise ConfigError(f"{function}: give the levels as a list, lowest first")
    return _checked(function, lambda: Score(text, given))


def _questions(value: Any) -> dict[str, Any]:
    """`evalpipe_ask`'s questions: JSON text, or a STRUCT of questions (STRUCTs or JSON)."""
    function = "evalpipe_ask"
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except ValueError as exc:
            raise ConfigError(f"{function}: questions is not JSON ({exc})") from None
    if isinstance(value, list) and all(isinstance(v, tuple) for v in value):
        value = dict(value)  # a MAP comes as (key, value) pairs
    if not isinstance(value, Mapping) or not value:
        raise ConfigError(f"{function}: give the questions as a JSON object or a STRUCT of them")
    out = {}
    for key, question in value.items():
        if isinstance(question, str):
            with contextlib.suppress(ValueError):
                question = json.loads(question)
        if not isinstance(question, Mapping):
            raise ConfigError(f"{function}: questions.{key} is not a question (a STRUCT/JSON)")
        out[key] = {k: v for k, v in question.items() if v is not None}
    try:
        answer_dtype(out)  # the questions checked as a config's are, with its messages
    except ConfigError as exc:
        raise ConfigError(f"{function}: {exc.message}") from None
    return out


# --------------------------------------------------------------------------- answer shapes


def _structure(dtype: Any) -> Any:
    """A polars type as `from_json`'s structure (JSON of DuckDB type names)."""
    if isinstance(dtype, pl.Struct):
        return {field.name: _structure(field.dtype) for field in dtype.fields}
    return "VARCHAR" if dtype == pl.String else "DOUBLE"


def _shape(questions: dict[str, Any], key: str | None) -> str:
    dtype = answer_dtype(questions)
    if key is not None:
        return json.dumps(_structure(dtype.to_schema()[key]))
    return json.dumps(_structure(dtype))


def _each(rows: int, shape: str) -> pa.Array:
    return pa.array([shape] * max(rows, 1), pa.string())[:rows]


def _choice_shape(instructions: pa.ChunkedArray, options: pa.ChunkedArray) -> pa.Array:
    given = _constant(instructions, "instructions", "evalpipe_choice")
    question = _choice(given, _constant(options, "options", "evalpipe_choice"))
    return _each(len(instructions), _shape({"q": question}, "q"))


def _score_shape(instructions: pa.ChunkedArray, levels: pa.ChunkedArray) -> pa.Array:
    given = _constant(instructions, "instructions", "evalpipe_score")
    question = _score(given, _constant(levels, "levels", "evalpipe_score"))
    return _each(len(instructions), _shape({"q": question}, "q"))


def _ask_shape(questions: pa.ChunkedArray) -> pa.Array:
    asked = _questions(_constant(questions, "questions", "evalpipe_ask"))
    return _each(len(questions), _shape(asked, None))


# --------------------------------------------------------------------------- the batches


class _Batch:
    """A function's batches: each one `answer_column` call on its distinct states."""

    def __init__(self, service: Service, progress: Any, function: str) -> None:
        self.service, self.progress, self.function = service, progress, function

    def _answers(self, state: pa.ChunkedArray, kind: pa.ChunkedArray, asked: Any) -> pl.Series:
        series = pl.Series("state", pl.from_arrow(state))
        if len(series) and _constant(kind, "the state's type", self.function) == "JSON":
            series = _json_states(series, self.function)
        try:
            return answer_column(series, asked, self.service, progress=self.progress)
        except InputError as exc:  # a column of another type: name the function
            raise InputError(f"{self.function}: {exc.message}") from None

    def noul(self, state: Any, kind: Any, instructions: Any, true: Any, false: Any) -> pa.Array:
        fn = self.function
        question = _noul(
            _constant(instructions, "instructions", fn), _constant(true, "true", fn),
            _constant(false, "false", fn),
        )  # fmt: skip
        answers = self._answers(state, kind, {"q": question})
        return answers.struct.field("q").to_arrow()

    def choice(self, state: Any, kind: Any, instructions: Any, options: Any) -> pa.Array:
        fn = self.function
        question = _choice(
            _constant(instructions, "instructions", fn), _constant(options, "options", fn)
        )
        return _json(self._answers(state, kind, {"q": question}).struct.field("q"))

    def score(self, state: Any, kind: Any, instructions: Any, levels: Any) -> pa.Array:
        fn = self.function
        question = _score(
            _constant(instructions, "instructions", fn), _constant(levels, "levels", fn)
        )
        return _json(self._answers(state, kind, {"q": question}).struct.field("q"))

    def ask(self, state: Any, kind: Any, questions: Any) -> pa.Array:
        asked = _questions(_constant(questions, "questions", self.function))
        return _json(self._answers(state, kind, asked))


def _json(answers: pl.Series) -> pa.Array:
    """Answer structs as JSON text (null stays null) for the macro's `from_json`."""
    return answers.struct.json_encode().to_arrow().cast(pa.string())


def _json_states(series: pl.Series, function: str) -> pl.Series:
    """JSON states: each must hold an object (an object state)."""
    try:
        decoded = series.str.json_decode()
    except pl.exceptions.PolarsError as exc:
        raise ConfigError(f"{function}: a JSON state that cannot be read ({exc})") from None
    if not isinstance(decoded.dtype, pl.Struct):
        raise ConfigError(f"{function}: a JSON state must be an object of named fields")
    return decoded
