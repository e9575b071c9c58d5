"""`evalpipe serve`: the embedded reference service as a standalone server.

The CLI group loads this command lazily (`LazyGroup` in evalpipe.cli.main), so that other commands
do not import a web server; `python -m evalpipe.service` runs it alone, which is how the process
mode starts its child. Once listening it prints a one-line banner on stderr (never the key) and
the base URL on stdout, the line a parent process reads.
"""

from __future__ import annotations

import asyncio
import logging
import sys
from typing import Any

import click

from evalpipe.errors import ConfigError
from evalpipe.service.counting import TOKEN_RULES
from evalpipe.service.server import ServiceServer, serve_until_stopped
from evalpipe.service.settings import (
    DEFAULT_MAX_BODY_BYTES,
    DEFAULT_MAX_INFLIGHT,
    DEFAULT_RPM,
    DEFAULT_SLOW_SECONDS,
    DEFAULT_TPS,
    KEY_ENV,
    ServiceSettings,
)


class ServeError(click.ClickException):
    """A usage error, printed as one line (`Error: ...`), exit code 2."""

    exit_code = 2


_PROBABILITY = click.FloatRange(0.0, 1.0)
_SECONDS = click.FloatRange(min=0.0)
_POSITIVE = click.FloatRange(min=0.0, min_open=True)


@click.command("serve")
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to listen on.")
@click.option(
    "--port", type=click.IntRange(0, 65535), default=8000, show_default=True, help="0 = any free."
)
@click.option("--api-key", envvar=KEY_ENV, show_envvar=True, help="The key clients must send.")
@click.option("--rpm", type=_POSITIVE, default=DEFAULT_RPM, show_default=True, help="Requests/min.")
@click.option("--tps", type=_POSITIVE, default=DEFAULT_TPS, show_default=True, help="Tokens/s.")
@click.option(
    "--limit-schedule",
    default="",
    metavar="T:rpm=N,tps=N;...",
    help='Change the limits T seconds after start, e.g. "30:rpm=600,tps=100000;60:rpm=1200".',
)
@click.option(
    "--max-inflight",
    type=click.IntRange(min=1),
    default=DEFAULT_MAX_INFLIGHT,
    show_default=True,
    help="529 beyond this many requests in flight.",
)
@click.option(
    "--max-body-bytes",
    type=click.IntRange(min=1),
    default=DEFAULT_MAX_BODY_BYTES,
    show_default=True,
    help="413 beyond this body size.",
)
@click.option("--latency", type=_SECONDS, default=0.0, help="Median seconds per request.")
@click.option("--fault-529", type=_PROBABILITY, default=0.0, help="P(529) per accepted request.")
@click.option("--fault-500", type=_PROBABILITY, default=0.0, help="P(500) per accepted request.")
@click.option("--fault-drop", type=_PROBABILITY, default=0.0, help="P(connection dropped).")
@click.option("--fault-truncate", type=_PROBABILITY, default=0.0, help="P(200 body cut short).")
@click.option("--fault-slow", type=_PROBABILITY, default=0.0, help="P(slow answer).")
@click.option(
    "--fault-hang", type=_PROBABILITY, default=0.0, help="P(silence, then connection dropped)."
)
@click.option(
    "--slow-seconds",
    type=_SECONDS,
    default=DEFAULT_SLOW_SECONDS,
    show_default=True,
    help="Delay of a slow answer, or how long a hang lasts.",
)
@click.option("--fault-seed", type=int, default=0, show_default=True, help="Seed of the faults.")
@click.option("--log-requests", is_flag=True, help="Log one line per request on stderr.")
@click.option(
    "--token-rule",
    type=click.Choice(TOKEN_RULES),
    default="words",
    show_default=True,
    help="How to count tokens: the job's own rule (words), as a subword tokenizer roughly "
    "does (subword: ceil(letters / 4) per word), or as a tokenizer reads the JSON it is sent "
    "(json: a state, instructions or rubric that is not a string counted as its JSON, every "
    "quote, bracket, colon, comma and escape a token: a packed request's cost as a real "
    "service bills it), to rehearse a service whose count differs.",
)
@click.option(
    "--token-factor",
    type=_POSITIVE,
    default=1.0,
    show_default=True,
    help="Multiply every token count by this (billing, rate limit and context limits).",
)
@click.option(
    "--pack-sway",
    type=_PROBABILITY,
    default=0.0,
    help="Share of answers to a question pointing at a field of the state (a packed row) that "
    "the rest of the state sways.",
)
@click.option(
    "--bill-per-question", is_flag=True, help="Bill the state once per question, not per request."
)
@click.option(
    "--max-questions",
    type=click.IntRange(min=0),
    default=0,
    show_default=True,
    help="422 naming `questions` beyond this many questions per request (0: no cap).",
)
@click.option(
    "--overconfidence",
    type=_POSITIVE,
    default=1.0,
    show_default=True,
    help="A known miscalibration: report every yes/no log-odds times T, every distribution "
    "raised to the power T (T > 1 overconfident); the answer at 1 is the truth.",
)
@click.option(
    "--drift",
    type=_PROBABILITY,
    default=0.0,
    help="Share of states answered anew under the same model ID (p(yes) turned, a choice "
    "moved one option on), drawn by a hash of the state and --drift-seed.",
)
@click.option("--drift-seed", type=int, default=0, show_default=True, help="Seed of --drift.")
@click.option("--stop-on-stdin-eof", is_flag=True, hidden=True)
def serve(host: str, port: int, stop_on_stdin_eof: bool, **options: Any) -> None:
    """Run the embedded reference evaluator (for offline runs; not the production model)."""
    settings = _settings(options)
    if settings.log_requests:
        logging.basicConfig(level=logging.INFO, stream=sys.stderr, format="%(message)s")
    server = ServiceServer(settings, host, port)
    try:
        asyncio.run(serve_until_stopped(server, _announce, stop_on_stdin_eof))
    except OSError as exc:  # the address is taken or not ours
        raise click.ClickException(f"cannot listen on {host}:{port}: {exc.strerror}") from None
    except KeyboardInterrupt:  # a second Ctrl-C during shutdown
        pass


def _settings(options: dict[str, Any]) -> ServiceSettings:
    if not options.get("api_key"):
        raise ServeError(f"no API key: pass --api-key or set {KEY_ENV}")
    try:
        return ServiceSettings(**options)
    except ConfigError as exc:
        raise ServeError(str(exc)) from None


def _announce(url: str) -> None:
    click.echo(
        f"evalpipe reference evaluator for offline runs (not the production model) at {url}",
        err=True,
    )
    click.echo(url)  # stdout: the line a parent process reads to learn the port
    sys.stdout.flush()
