"""Where files live: a local path or an object-store URI behind one small interface, and
atomic writes.
"""

from evalpipe.stores.files import fsync, temp_pattern, write_bytes
from evalpipe.stores.location import (
    Folder,
    Location,
    as_folder,
    cache_home,
    is_uri,
    local_dir,
    parse_location,
    resolve,
    shown,
)
from evalpipe.stores.patience import (
    FIRST_DELAY,
    MAX_DELAY,
    PATIENCE_SECONDS,
    patiently,
    unreachable,
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
