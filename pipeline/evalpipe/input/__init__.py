"""Parquet in: a corpus (a file, a folder or an object-store prefix) as bounded batches of
(id, state) rows.
"""

from evalpipe.input.corpus import corpus_files, corpus_paths
from evalpipe.input.guess import Guess, guess_columns
from evalpipe.input.selection import Selection
from evalpipe.input.source import Row, Source, SourceSpec
from evalpipe.input.strata import Strata, strata_of

__all__ = [
    "Guess",
    "Row",
    "Selection",
    "Source",
    "SourceSpec",
    "Strata",
    "corpus_files",
    "corpus_paths",
    "guess_columns",
    "strata_of",
]
