"""One rule for every URL the job shows or sends: never its user or password.

A URL may carry credentials in its userinfo (`https://user:password@host`, `s3://KEY:SECRET@bucket`),
and whatever holds the URL would then hold them: a log line, an error message, a metric's label,
a span's attribute, a lineage event, the Pushgateway's grouping key (part of the push URL). So:

- a URL the config names (`service.base_url`, a store URI, `metrics.pushgateway`) with
  credentials is refused when the config is read (`refusal`), in one line that says where they
  belong (a variable) and does not repeat them; credentials always come from variables;
- what is shown of a URL, anywhere, is `scrubbed(url)`: without its userinfo (a query parameter
  that carries a credential, such as a signed URL's signature, shown as `[redacted]`);
- a text made from lower layers' words (an exception's message, a traceback) passes `scrubbed`
  before it leaves the process: every URL in it loses its userinfo, and the secrets it is handed
  (the API key) and the passwords of the proxies the environment names (a proxy without a
  scheme is no URL to the first rule) are cut wherever they occur.

Azure's URIs are the one exception to "no user": `abfs://container@account...` names a
container, not a person, so there only a password is refused, and the container is shown.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable
from urllib.parse import unquote, urlsplit

REDACTED = "[redacted]"
MIN_SECRET = 8  # shorter "secrets" (a toy key) are cut only where they stand alone
# Schemes whose user part names a place, not a person (pyarrow's AzureFileSystem URIs).
_NAMED_USER = frozenset({"abfs", "abfss"})
# A URL's start and its userinfo up to the last "@" before the host: characters a URL cannot
# hold unescaped (quotes, spaces, brackets) end it, so a JSON line or a repr stays whole.
_USERINFO = re.compile(r"\b([A-Za-z][A-Za-z0-9+.-]*)://([^\s/?#\"<>\\`{}|^]*)@")
# The same with a password holding `/` (as AWS secret keys may), which a URL cannot hold
# unescaped but a config or an environment variable may: `user:pa/ss@host`. A `:` followed by
# digits and a `/` is a port and a path, not this.
_SLASHED = re.compile(
    r"\b([A-Za-z][A-Za-z0-9+.-]*)://([^\s/?#\"<>\\`{}|^@:]*:(?![0-9]+(?:[/?#]|$))"
    r"[^\s?#\"<>\\`{}|^@]*/[^\s?#\"<>\\`{}|^@]*)@"
)
# A query parameter that carries a credential, by how its name ends (Azure's `client_secret`, a
# SAS `sig`, a signed URL's `X-Amz-Signature`, `X-Amz-Credential` and `X-Amz-Security-Token`,
# an `api_key`, an `access_token`, an `auth`, a `pwd`, a `jwt`; not `credential_kind`): its value.
_QUERY_SECRET = re.compile(
    r"([?&][^=&\s\"#]*(?:secret|password|passwd|pwd|token|jwt|auth|sig|signature|credential|key)=)"
    r"[^&\s\"#]*",
    re.IGNORECASE,
)
# Where credentials belong instead, by scheme.
_VARIABLES = {
    "s3": "AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY (or AWS_PROFILE)",
    "gs": "GOOGLE_APPLICATION_CREDENTIALS",
    "gcs": "GOOGLE_APPLICATION_CREDENTIALS",
    "abfs": "AZURE_STORAGE_ACCOUNT_KEY (or an Azure identity)",
    "abfss": "AZURE_STORAGE_ACCOUNT_KEY (or an Azure identity)",
    "hdfs": "the Kerberos ticket cache (kinit)",
}


def _kept_user(scheme: str, userinfo: str) -> str:
    """What of a URL's userinfo may be shown: an Azure container name, else nothing."""
    if scheme.lower() in _NAMED_USER and ":" not in userinfo:
        return f"{userinfo}@"
    return ""


def scrubbed(text: str, secrets: Iterable[str | None] = ()) -> str:
    """`text` fit to leave the process: every URL in it without its userinfo
    (`https://user:pw@host:8/x` is `https://host:8/x`), and each of `secrets` and of the
    environment's proxies' passwords cut (a long one wherever it occurs, a short one where it
    stands alone)."""
    text = _SLASHED.sub(lambda m: f"{m[1]}://", text)
    text = _USERINFO.sub(lambda m: f"{m[1]}://{_kept_user(m[1], m[2])}", text)
    text = _QUERY_SECRET.sub(rf"\1{REDACTED}", text)
    for secret in (*secrets, *proxy_passwords()):
        if not secret:
            continue
        if len(secret) >= MIN_SECRET:
            text = text.replace(secret, REDACTED)
        else:
            text = re.sub(rf"(?<![\w-]){re.escape(secret)}(?![\w-])", REDACTED, text)
    return text


def has_credentials(url: str) -> bool:
    """Does `url` hold a user or a password, or a credential among its query parameters? A
    port that is not a number counts too: it is what a password with a `/` in it (as AWS
    secret keys have) looks like unescaped."""
    parts = urlsplit(url)
    user, at, _ = parts.netloc.rpartition("@")
    if at and (":" in user or parts.scheme.lower() not in _NAMED_USER):
        return True
    if parts.query and _QUERY_SECRET.search(f"?{parts.query}"):
        return True
    try:
        parts.port  # noqa: B018 - raises ValueError for a port that is not a number
    except ValueError:
        return True
    return False


def refusal(url: str, instead: str | None = None) -> str | None:
    """Why a config may not hold `url` (None: it holds no credentials), to follow the key's
    name: where credentials go (`instead`, else the store's variables), never repeating them."""
    if not has_credentials(url):
        return None
    parts = urlsplit(url)
    scheme = parts.scheme.lower()
    where = instead or _VARIABLES.get(scheme, "the store's own variables or config files")
    what = "a user or password (USER:PASSWORD@ before its host)"
    if "@" not in parts.netloc and _QUERY_SECRET.search(f"?{parts.query}"):
        what = "a credential among its parameters (a secret, token, signature or key)"
    return (
        f"holds {what}; credentials never go in a URL, which logs, metrics and lineage show: "
        f"put them in {where}"
    )


def password_of(url: str | None) -> tuple[str, ...]:
    """The password in `url`'s userinfo (as written, and unescaped), to be cut from texts a
    lower layer made of the URL (`scrubbed`); none when it holds none. A URL without a scheme
    is read as curl reads a proxy's (`http://` before it)."""
    if not url:
        return ()
    netloc = urlsplit(url if "://" in url else f"http://{url}").netloc
    userinfo, at, _ = netloc.rpartition("@")
    _, colon, password = userinfo.partition(":")
    if not (at and colon and password):
        return ()
    return tuple(dict.fromkeys((password, unquote(password))))


def proxy_passwords() -> tuple[str, ...]:
    """The passwords of the proxies the environment names (HTTPS_PROXY, HTTP_PROXY, ALL_PROXY,
    in either case): secrets a lower layer's message may quote in any form (a proxy URL
    without a scheme is no URL to `scrubbed`), so what the run prints cuts them too."""
    names = ("https_proxy", "http_proxy", "all_proxy")
    values = {os.environ.get(n) for name in names for n in (name, name.upper())}
    return tuple(p for value in sorted(v for v in values if v) for p in password_of(value))
