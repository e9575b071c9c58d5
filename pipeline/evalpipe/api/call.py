"""What a `score` or `plan` call is made of: its data as a Parquet file, its job config, its output.

The Python API's calls build the same job config a YAML file would (`evalpipe.config`). A
DataFrame (polars, pandas), a pyarrow Table or a DuckDB relation is written to a Parquet file
in a temporary folder first (a path or URI is read where it is); the output goes to `output`,
else to the folder the call keeps (`evalpipe.api.kept`), else to the temporary folder.
"""

from __future__ import annotations

import contextlib
import tempfile
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq

from evalpipe.api.kept import file_digest, keeps, kept_folder, path_identity
from evalpipe.api.questions import Question, Service, question_dicts
from evalpipe.config import JobConfig, parse_config
from evalpipe.engine import VERSION
from evalpipe.errors import InputError
from evalpipe.stores import is_uri

Questions = Mapping[str, Question | Mapping[str, Any]]


@contextlib.contextmanager
def job_configs(
    data: Any,
    id_column: str,
    state: str | Sequence[str],
    questions: Questions,
    service: Service,
    output: str | Path | None,
    keep: bool = False,
) -> Iterator[list[JobConfig]]:
    """The call's job configs, in the order to try: writing to `output`, else to a temporary
    folder; with `keep` (and the answer cache on), first to the folder `evalpipe.api.kept`
    names for this call, so that the same call again resumes it."""
    with tempfile.TemporaryDirectory(prefix="evalpipe-") as temp:
        path = _parquet(data, Path(temp))
        config = {
            "input": {"path": path, "id_column": id_column,
                      "state": state if isinstance(state, str) else list(state)},
            "output": {"path": str(output) if output is not None else str(Path(temp) / "out")},
            **service.config(),
            "questions": question_dicts(questions),
        }  # fmt: skip
        configs = [parse_config(config, "evalpipe.score")]
        if keep and output is None and keeps(configs[0]):
            given = isinstance(data, str | Path)
            identity = path_identity(path) if given else file_digest(Path(path))
            config["output"]["path"] = str(kept_folder(configs[0], identity, VERSION))
            configs.insert(0, parse_config(config, "evalpipe.score"))
        yield configs


def _parquet(data: Any, folder: Path) -> str:
    """`data` as a Parquet path: a path or URI as it is, anything tabular written once."""
    if isinstance(data, str | Path):
        return str(data)
    path = folder / "input.parquet"
    pq.write_table(_arrow(data), path)
    return str(path)


def _arrow(data: Any) -> pa.Table:
    if isinstance(data, pa.Table):
        return data
    if isinstance(data, pl.DataFrame):
        return data.to_arrow()
    if isinstance(data, pl.LazyFrame):
        return data.collect().to_arrow()
    module = type(data).__module__.split(".")[0]
    if module == "pandas":
        return pa.Table.from_pandas(data, preserve_index=False)
    if module == "duckdb":
        return data.arrow()
    raise InputError(
        f"data: a {type(data).__name__} is not a table; give a polars or pandas DataFrame, a "
        "pyarrow Table, a DuckDB relation, or a Parquet path"
    )


def input_order(config: JobConfig) -> pl.DataFrame:
    """The input's ids in file order, numbered (the job reads the corpus in that order)."""
    from evalpipe.input import corpus_files

    name = config.input.id_column
    path = str(config.input.path)
    if is_uri(path):
        import pyarrow.dataset as ds

        ids = pl.from_arrow(ds.dataset(path, format="parquet").to_table(columns=[name]))
    else:
        ids = pl.scan_parquet(corpus_files(path)).select(name).collect()
    assert isinstance(ids, pl.DataFrame)
    return ids.with_row_index("__order")
