"""Where files live: a local path or an object-store URI behind one small interface, and
atomic writes; and what every outbound connection trusts (`trust`: the company CA from
SSL_CERT_FILE / SSL_CERT_DIR, in the form each library takes).

`cache_home`, the patience helpers, the safe opening of files in shared folders
(`evalpipe.stores.private`) and the rule for URLs (`evalpipe.stores.urls`: never a user or
password shown, `scrubbed`) load with the package; the Parquet and filesystem code
(pyarrow) on first use (`evalpipe.lazy`), so a Ray actor that needs only the folder (the
account's Budget) does not import pyarrow.
"""

from typing import TYPE_CHECKING

from evalpipe.lazy import lazy_exports
from evalpipe.stores.home import cache_home as cache_home
from evalpipe.stores.patience import (
    FIRST_DELAY as FIRST_DELAY,
    MAX_DELAY as MAX_DELAY,
    PATIENCE_SECONDS as PATIENCE_SECONDS,
    patiently as patiently,
    unreachable as unreachable,
)
from evalpipe.stores.private import open_private as open_private, remove_folder as remove_folder
from evalpipe.stores.urls import (
    refusal as refusal,
    scrubbed as scrubbed,
)

if TYPE_CHECKING:
    from evalpipe.stores.files import (
        fsync as fsync,
        is_full as is_full,
        temp_pattern as temp_pattern,
        write_bytes as write_bytes,
    )
    from evalpipe.stores.location import (
        Folder as Folder,
        Location as Location,
        as_folder as as_folder,
        is_uri as is_uri,
        local_dir as local_dir,
        parse_location as parse_location,
        resolve as resolve,
        shown as shown,
    )
    from evalpipe.stores.trust import (
        ca_bundle as ca_bundle,
        requests_verify as requests_verify,
        tls_context as tls_context,
    )

__all__, __getattr__ = lazy_exports(__name__)
