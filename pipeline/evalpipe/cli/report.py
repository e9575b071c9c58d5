"""`evalpipe report OUTPUT [--input CORPUS] [--html PATH] [--against B] [--labels LABELS]`: the
report, written as one file.

Everything is computed before anything is written, and the page lands atomically (on a disk,
one rename; into an object-store output, one upload, which the store shows whole or not at
all), so a failure (exit 2 with one `InputError` line for an unusable output or corpus) leaves
no file behind, and an earlier report stays whole until the new one replaces it. OUTPUT is a
local directory or an object-store URI: `evalpipe.report` reads both alike.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Any

import click
import polars as pl
import pyarrow as pa

from evalpipe.cli.options import reports_errors
from evalpipe.errors import ConfigError, InputError, OutputError, first_line
from evalpipe.stores import Folder, Location, is_uri, parse_location

DEFAULT_NAME = "_report.html"  # starts with "_": readers of the output skip it as metadata


def _target(output: Location, html: Path | None) -> Path | None:
    """Where the page goes on this disk; None: into the object-store output itself."""
    if html is None and is_uri(output):
        return None
    target = html if html is not None else Path(output) / DEFAULT_NAME
    if not target.parent.is_dir():
        raise InputError(f"--html '{target}': directory '{target.parent}' does not exist")
    return target


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def _write(target: Path, text: str) -> None:
    """Write `text` to a hidden temporary file beside `target`, then rename it into place."""
    temp: str | None = None
    try:
        fd, temp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
        with os.fdopen(fd, "w", encoding="utf-8") as file:
            file.write(text)
        os.chmod(temp, 0o666 & ~_umask())  # mkstemp makes 0600; a report is for others to read
        os.replace(temp, target)
    except OSError as exc:
        if temp is not None:
            Path(temp).unlink(missing_ok=True)
        raise OutputError(f"cannot write the report to '{target}': {exc.strerror}") from None


def _publish(output: Location, target: Path | None, text: str) -> Path | str:
    """Write the page to `target`, or (None) into the object-store output as one PUT, which
    the store shows whole or not at all; returns where it went."""
    if target is not None:
        _write(target, text)
        return target
    folder = Folder(output, key="OUTPUT")
    try:
        folder.write_bytes(DEFAULT_NAME, text.encode())
    except OSError as exc:
        where = folder.shown_name(DEFAULT_NAME)
        raise OutputError(f"cannot write the report to '{where}': {first_line(exc)}") from None
    return folder.shown_name(DEFAULT_NAME)


def _extra(
    output: Location, against: str | None, labels: str | None
) -> tuple[list[Any], tuple[dict[str, Any], dict[str, Any]] | None]:
    """The sections `--against` and `--labels` add (`evalpipe diff` and `agree`'s figures),
    and with labels, `agree`'s and `infer`'s documents for the Trust section."""
    from evalpipe.analysis import agreement, compare, infer_output, read_labels
    from evalpipe.reading import open_output
    from evalpipe.report import agreement_section, diff_section

    if against is None and labels is None:
        return [], None
    table = open_output(str(output))
    sections = []
    if against is not None:
        result, _ = compare(open_output(against), table)
        sections.append(diff_section(result.as_json()))
    if labels is None:
        return sections, None
    read = read_labels(labels)
    agreed = agreement(table, read)
    sections.append(agreement_section(agreed, labels))
    return sections, (agreed, infer_output(table, read))


def _is_series(output: Location) -> bool:
    """A folder of nightly outputs (`dt=*` folders) and no rows of its own, on a local disk or
    an object store."""
    from evalpipe.output import part_names
    from evalpipe.reading import nights

    if not is_uri(output) and not Path(output).is_dir():
        return False
    try:
        has_parts = bool(part_names(Folder(output, key="OUTPUT")))
    except (ConfigError, OSError):
        return False  # open_output says what is wrong with it
    return not has_parts and bool(nights(str(output)))


def _write_series(output: Location, html: Path | None) -> Path | str:
    from evalpipe.analysis import nightly_series
    from evalpipe.report import render, series_page

    target = _target(output, html)
    return _publish(output, target, render(series_page(nightly_series(str(output)))))


def write_report(
    output: Location,
    corpus: Location | None = None,
    html: Path | None = None,
    against: str | None = None,
    labels: str | None = None,
) -> Path | str:
    """Build the report of `output`, a local directory or an object-store URI (beside
    `corpus`; compared with the output `against`; checked against `labels`) and write it;
    returns where it went: a local path, or the URI of `_report.html` in the store."""
    from evalpipe.report import build, open_corpus, render, report_output

    output = parse_location(output)
    if _is_series(output):
        return _write_series(output, html)
    out = report_output(output)
    target = _target(output, html)
    rows = open_corpus(corpus, out) if corpus is not None else None
    extra, labelled = _extra(output, against, labels)
    try:
        page = build(out, rows, str(corpus) if corpus else "", extra, labelled)
    except (pl.exceptions.PolarsError, pa.ArrowException, OSError) as exc:
        raise InputError(f"output '{out.where}' cannot be read: {first_line(exc)}") from None
    return _publish(output, target, render(page))


@click.command()
@click.argument("output")
@click.option(
    "--input",
    "corpus",
    default=None,
    metavar="CORPUS",
    help="The corpus the job scored (a Parquet file, a directory or prefix of them, local or "
    "an object-store URI, as input.path takes it): adds its coverage and a sample of rows "
    "beside their answers.",
)
@click.option(
    "--html",
    type=click.Path(path_type=Path, dir_okay=False),
    default=None,
    help=f"Where to write the page, on this disk [OUTPUT/{DEFAULT_NAME}: for an object-store "
    "OUTPUT, written into the store as one upload].",
)
@click.option(
    "--against",
    default=None,
    metavar="EARLIER",
    help="Another output of the same corpus (an earlier run; a directory or object-store URI): "
    "adds a section of what changed since it, as `evalpipe diff B OUTPUT` computes it.",
)
@click.option(
    "--labels",
    default=None,
    metavar="LABELS",
    help="People's labels (Parquet or CSV, as `evalpipe agree` takes them): adds a section "
    "of the judge's agreement with them, and to the Trust section the corpus's shares they "
    "correct (as `evalpipe infer`) and a reliability diagram per yes/no question.",
)
@reports_errors
def report(
    output: str, corpus: str | None, html: Path | None, against: str | None, labels: str | None
) -> None:
    """Write one self-contained HTML page about the job output in OUTPUT (a directory, or an
    object-store URI such as s3://bucket/out, read with the store's standard credentials):
    outcomes, every question's answers, cost, runs, throughput and models (with --input, the
    corpus's coverage too; with --against, what changed since another run; with --labels,
    agreement with people). An OUTPUT that holds nightly outputs in dt=* folders
    (out/dt=2026-11-24/) is drawn as a trend: one chart per question across nights, model
    changes marked. The page needs no network to view; its path (or URI) is printed."""
    click.echo(write_report(output, corpus, html, against, labels))
