"""What every outbound connection trusts, said once: the CAs that SSL_CERT_FILE and SSL_CERT_DIR
name, as the evaluation service's client, curl and Python's `ssl` read them.

evalpipe talks to more than the service: OpenLineage and OTLP receivers (through `requests`),
a Pushgateway (`urllib`), object stores (pyarrow's S3 client, delta-rs). Each library is told of
a CA its own way, and `requests` never reads SSL_CERT_FILE: a company CA given the standard way
reached the service and nothing else. This module turns the two variables into what each
library takes:

- `tls_context()`: an `ssl.SSLContext` for Python clients (the service's, the Pushgateway's):
  SSL_CERT_FILE's and SSL_CERT_DIR's CAs (both when both are set), else certifi's bundle;
- `ca_bundle(*also)`: one PEM file for a library that takes a path (`requests`' `verify`, OTLP's
  certificate, pyarrow's `tls_ca_file_path`): SSL_CERT_FILE's and SSL_CERT_DIR's CAs together
  with those the library's own setting names (`also`: REQUESTS_CA_BUNDLE,
  OTEL_EXPORTER_OTLP_CERTIFICATE, ...). Nothing the user set is dropped: the company CA is
  added to it. None when neither standard variable is set: each library then does as it always
  does.

A bundle that must be made (two sources or more) is written once per process to a private
temporary file (mode 0600), removed when the process exits.
"""

from __future__ import annotations

import atexit
import contextlib
import functools
import os
import re
import ssl
import tempfile
from pathlib import Path

import certifi

from evalpipe.errors import ConfigError

CA_FILE = "SSL_CERT_FILE"
CA_DIR = "SSL_CERT_DIR"
_PEM = re.compile(rb"-----BEGIN CERTIFICATE-----.+?-----END CERTIFICATE-----", re.DOTALL)


def standard() -> tuple[str | None, str | None]:
    """(SSL_CERT_FILE, SSL_CERT_DIR) as set, None for unset or empty."""
    return os.environ.get(CA_FILE) or None, os.environ.get(CA_DIR) or None


def tls_context() -> ssl.SSLContext:
    """A verifying TLS context: SSL_CERT_FILE's and SSL_CERT_DIR's CAs, else certifi's bundle.
    ConfigError, naming the variable, if one names what cannot be read."""
    cafile, capath = standard()
    if cafile is None and capath is None:
        return ssl.create_default_context(cafile=certifi.where())
    try:
        return ssl.create_default_context(cafile=cafile, capath=capath)
    except (OSError, ssl.SSLError) as exc:
        raise ConfigError(
            f"{_named(cafile, capath)}: cannot load the CA certificates ({exc}); {_ASK}"
        ) from None


_ASK = "name a PEM file of CA certificates (SSL_CERT_FILE) or a directory of them (SSL_CERT_DIR)"


def requests_verify(own: str | None = None) -> str | None:
    """`verify` for a client built on `requests`: `ca_bundle` with the client's own CA setting
    (`own`), else with what requests itself reads (REQUESTS_CA_BUNDLE, CURL_CA_BUNDLE). None:
    leave the client as it is (neither standard variable is set)."""
    env = os.environ
    return ca_bundle(own or env.get("REQUESTS_CA_BUNDLE") or env.get("CURL_CA_BUNDLE"))


def _named(cafile: str | None, capath: str | None) -> str:
    return f"{CA_FILE}={cafile}" if cafile else f"{CA_DIR}={capath}"


def ca_bundle(*also: str | None) -> str | None:
    """One PEM file of the CAs SSL_CERT_FILE and SSL_CERT_DIR name, and of those `also` names
    (files or directories a library's own settings name; None entries are skipped). None when
    neither standard variable is set. The file itself when it is the only source."""
    cafile, capath = standard()
    if cafile is None and capath is None:
        return None
    sources = tuple(dict.fromkeys(s for s in (cafile, capath, *also) if s))
    if len(sources) == 1 and os.path.isfile(sources[0]):
        return sources[0]
    return _bundled(sources)


@functools.cache
def _bundled(sources: tuple[str, ...]) -> str:
    """The certificates of `sources` in one private file (made once per process)."""
    found: dict[bytes, None] = {}
    for source in sources:
        for pem in _certificates(Path(source)):
            found.setdefault(pem)
    if not found:
        cafile, capath = standard()
        raise ConfigError(f"{_named(cafile, capath)}: no CA certificate found there; {_ASK}")
    handle, name = tempfile.mkstemp(prefix="evalpipe-ca-", suffix=".pem")
    with os.fdopen(handle, "wb") as out:
        out.write(b"\n".join(found) + b"\n")
    atexit.register(_remove, name)
    return name


def _certificates(source: Path) -> list[bytes]:
    """The PEM certificates in a file, or in the files of a directory (c_rehash's links too)."""
    files = sorted(source.iterdir()) if source.is_dir() else [source]
    found: list[bytes] = []
    for file in files:
        with contextlib.suppress(OSError):
            if file.is_file():
                found.extend(_PEM.findall(file.read_bytes()))
    return found


def _remove(name: str) -> None:
    with contextlib.suppress(OSError):
        os.unlink(name)
