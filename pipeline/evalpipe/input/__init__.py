"""Parquet in: a corpus (a file, a folder or an object-store prefix) as bounded batches of
(id, state) rows.
"""

from evalpipe.input.corpus import corpus_files, corpus_paths
from evalpipe.input.guess import Guess, guess_columns
from evalpipe.input.source import Row, Selection, Source, SourceSpec

__all__ = [
    "Guess",
    "Row",
    "Selection",
    "Source",
    "SourceSpec",
    "corpus_files",
    "corpus_paths",
    "guess_columns",
]
