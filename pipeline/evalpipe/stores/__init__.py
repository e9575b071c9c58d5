"""Where files live: a local path or an object-store URI behind one small interface, and
atomic writes.

`cache_home` and the patience helpers load with the package; the Parquet and filesystem code
(pyarrow) on first use (`evalpipe.lazy`), so a Ray actor that needs only the folder (the
account's Budget) does not import pyarrow.
"""

from typing import TYPE_CHECKING

from evalpipe.lazy import lazy_exports
from evalpipe.stores.home import cache_home
from evalpipe.stores.patience import (
    FIRST_DELAY,
    MAX_DELAY,
    PATIENCE_SECONDS,
    patiently,
    unreachable,
)

if TYPE_CHECKING:
    from evalpipe.stores.files import fsync, is_full, temp_pattern, write_bytes
    from evalpipe.stores.location import (
        Folder,
        Location,
        as_folder,
        is_uri,
        local_dir,
        parse_location,
        resolve,
        shown,
    )

__all__ = [
    "FIRST_DELAY",
    "MAX_DELAY",
    "PATIENCE_SECONDS",
    "Folder",
    "Location",
    "as_folder",
    "cache_home",
    "fsync",
    "is_full",
    "is_uri",
    "local_dir",
    "parse_location",
    "patiently",
    "resolve",
    "shown",
    "temp_pattern",
    "unreachable",
    "write_bytes",
]

__getattr__ = lazy_exports(
    __name__,
    {
        "evalpipe.stores.files": ("fsync", "is_full", "temp_pattern", "write_bytes"),
        "evalpipe.stores.location": (
            "Folder",
            "Location",
            "as_folder",
            "is_uri",
            "local_dir",
            "parse_location",
            "resolve",
            "shown",
        ),
    },
)
