"""docs/openapi.yaml against the live embedded service, fuzzed by schemathesis.

Valid requests must be answered 2xx, invalid ones refused with a 4xx, nothing may be a 5xx, and
every response (status, headers, body) must be one the document describes. Bounded: a fixed
number of examples per operation and mode, so the file runs in seconds.
"""

from __future__ import annotations

from pathlib import Path

import schemathesis
from hypothesis import HealthCheck, settings
from schemathesis import GenerationMode

from conftest import API_KEY
from evalpipe.service import EmbeddedService

DOCUMENT = Path(__file__).resolve().parents[1] / "docs" / "openapi.yaml"
EXAMPLES = 40  # per operation and generation mode


# Loaded at import (a lazy `from_fixture` schema trips over pytest 9's node ids); the base URL
# of the live service comes from the fixture at call time.
schema = schemathesis.openapi.from_path(DOCUMENT)
schema.config.update(headers={"Authorization": f"Bearer {API_KEY}"})
schema.config.generation.update(
    modes=[GenerationMode.POSITIVE, GenerationMode.NEGATIVE], max_examples=EXAMPLES
)


@schema.parametrize()
@settings(deadline=None, suppress_health_check=list(HealthCheck))
def test_the_service_conforms_to_its_document(
    case: schemathesis.Case, service: EmbeddedService
) -> None:
    case.call_and_validate(base_url=service.base_url)


def test_the_cli_finds_no_issue_in_any_phase(service: EmbeddedService) -> None:
    # The CLI adds what the pytest integration does not run: the coverage phase (boundary
    # values, every missing field) and `--checks all`. Its command, in this process (click's
    # runner): a process of its own would only add the imports of schemathesis and hypothesis.
    from click.testing import CliRunner
    from schemathesis.cli import schemathesis as cli

    args = ["run", str(DOCUMENT), "--url", service.base_url]
    args += ["-H", f"Authorization: Bearer {API_KEY}"]
    args += ["--checks", "all", "--mode", "all", "--phases", "examples,coverage,fuzzing"]
    args += ["--max-examples", str(EXAMPLES), "--seed", "20251122", "--no-color"]
    done = CliRunner().invoke(cli, args)
    assert done.exit_code == 0, done.output[-3000:] + repr(done.exception)
    assert "No issues found" in done.output
