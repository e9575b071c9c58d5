"""The analysts' report: one self-contained HTML page about a job's output.

    output.py   open an output (`evalpipe.reading`) and its corpus, as the report needs them
    data.py     the figures: polars lazy, streaming aggregates -> small tables
    corpus.py   with --input: coverage of the corpus and a sample of rows beside answers
    charts.py   Altair charts of those tables, rendered to static SVG by vl-convert
    compare.py  with --against / --labels: evalpipe diff's and agree's figures, and charts
    trust.py    the calibrated columns, the rows kept for a promised agreement, the canary
    trend.py    a nightly series (out/dt=*): one chart per question across nights
    sections.py what the page shows, section by section
    page.py     the HTML (Jinja2, inline CSS and SVG, no script, nothing fetched)

The notebook (notebooks/explore_output.ipynb) calls `data` and `charts` for the same charts.
`evalpipe report` (evalpipe.cli.report) builds the page and writes it atomically.
"""

from evalpipe.report.compare import agreement_section, diff_section
from evalpipe.report.output import open_corpus, report_output
from evalpipe.report.page import render
from evalpipe.report.sections import build
from evalpipe.report.trend import series_page

__all__ = [
    "agreement_section",
    "build",
    "diff_section",
    "open_corpus",
    "render",
    "report_output",
    "series_page",
]
