"""Schemathesis against the live test server, on the committed ``openapi.yaml``, as a researcher and as an
admin, with every check on. Any 5xx, any answer outside the schema (an undocumented status, a body, a header
or a content type the schema does not describe), and any authorization finding (a resource used after its
deletion, auth ignored, another's object reached) fails the test; the two checks that judge how lenient
input parsing is (``negative_data_rejection``: ``"reason": 0`` taken as ``"0"``; ``positive_data_acceptance``)
are reported, not failed, as they flag DRF's own coercions rather than wrong answers.

The run is bounded (``MAX_EXAMPLES`` cases per operation and phase, one worker, a fixed seed, so CI is
repeatable); it prints how many requests the server answered. Destructive operations keep to what the run
may lose: revoking the run's own token (``DELETE /api/v1/auth/token/``) is left out, and revoking a token by
id is pointed at a token issued for it. ``positive_data_acceptance`` also expects a 400: the schema cannot say
that a team must exist, that a change needs a reason or which characters text may hold, so input the schema
allows may still be refused, by name, as bad input.

Each role runs the phases ``PHASES`` gives it (the admin every one), as a test of its own, so that xdist runs
the two roles side by side on two workers (each with its own live server and database). Run it alone with
``pytest tests/portal/test_fuzz_api.py -s``; with another seed: ``QM_FUZZ_SEED=7``; with more or fewer
cases: ``QM_FUZZ_EXAMPLES`` (CI's second run, on the embedded defaults, takes 2). Its figures
(requests answered, test cases, findings) are printed and written to ``var/schemathesis-<role>.json`` (under
``QM_VAR_DIR``), as xdist does not show a passing test's output.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from django.conf import settings
from django.core.signals import request_started

from tenancy import actions
from tests.conftest import World

pytestmark = pytest.mark.fuzz

ROOT = Path(__file__).resolve().parents[2]
SCHEMA = ROOT / "openapi.yaml"
MAX_EXAMPLES = int(os.environ.get("QM_FUZZ_EXAMPLES", "5"))
SEED = int(os.environ.get("QM_FUZZ_SEED", "1"))
ROLES = {"alice": "researcher", "adam": "admin"}
#: The phases each role runs. Schemathesis's coverage phase sends each operation a fixed set of boundary and
#: invalid inputs (about 8,500 requests, whatever ``MAX_EXAMPLES``): the admin, who may call every operation
#: deepest, sends them all. The researcher runs the phases that find what a role changes: generated requests,
#: the schema's examples and the stateful sequences that reach objects through links (every answer checked for
#: another's object reached, auth ignored, a resource used after its deletion). That halved the fuzzing's cost
#: (its coverage phase was 90% of each role's requests).
PHASES = {"researcher": "examples,fuzzing,stateful", "admin": "examples,coverage,fuzzing,stateful"}
#: Failures that judge input leniency, not answers (see the module's docstring).
LENIENCY = {"AcceptedNegativeData", "RejectedPositiveData"}

CONFIG = """\
[checks.positive_data_acceptance]
expected-statuses = ["2xx", "3xx", "400", "401", "403", "404", "409", "429"]

[[operations]]
include-name = "DELETE /api/v1/auth/tokens/{{id}}/"
parameters = {{ "path.id" = {sacrificial} }}
"""


@pytest.fixture
def api_requests() -> Iterator[list[str]]:
    """The paths of the API requests the live server answers while the test runs."""
    seen: list[str] = []

    def count(sender: Any, environ: dict[str, Any] | None = None, **kwargs: Any) -> None:
        path = (environ or {}).get("PATH_INFO", "")
        if path.startswith("/api/"):
            seen.append(path)

    request_started.connect(count, weak=False)
    yield seen
    request_started.disconnect(count)


def _schemathesis(
    base_url: str, token: str, sacrificial: int, phases: str, folder: Path
) -> tuple[int, str, dict[str, Any]]:
    config = folder / "schemathesis.toml"
    config.write_text(CONFIG.format(sacrificial=sacrificial))
    report = folder / "report.json"
    command = [
        str(Path(sys.executable).with_name("st")),
        "--config-file",
        str(config),
        "run",
        str(SCHEMA),
        "--url",
        base_url,
        "--checks",
        "all",
        "--phases",
        phases,
        "--max-examples",
        str(MAX_EXAMPLES),
        "--seed",
        str(SEED),
        "--workers",
        "1",
        "--header",
        f"Authorization: Bearer {token}",
        "--exclude-name",
        "DELETE /api/v1/auth/token/",
        "--report",
        "json",
        "--report-json-path",
        str(report),
        "--no-color",
    ]
    # In its own folder: Schemathesis keeps a cache of what it learnt about the API where it runs.
    done = subprocess.run(command, capture_output=True, text=True, timeout=900, check=False, cwd=folder)
    return done.returncode, done.stdout + done.stderr, json.loads(report.read_text()) if report.exists() else {}


@pytest.mark.parametrize(("username", "role"), list(ROLES.items()))
def test_schemathesis_finds_no_server_error_or_schema_violation(
    transactional_db: Any,
    live_server: Any,
    world: World,
    api_requests: list[str],
    tmp_path: Path,
    capsys: Any,
    username: str,
    role: str,
) -> None:
    user = world.users[username]
    _, token = actions.issue_token(user, name=f"schemathesis ({role})")
    sacrificial, _ = actions.issue_token(user, name="schemathesis: revoked by the run")
    status, output, report = _schemathesis(live_server.url, token, sacrificial.pk, PHASES[role], tmp_path)
    cases = report.get("test_cases", {})
    figures = {
        "seed": SEED,
        "max_examples": MAX_EXAMPLES,
        "role": role,
        "requests": len(api_requests),
        "phases": PHASES[role],
        "test_cases": cases.get("generated"),
        "findings": {f["code"]: f["count"] for f in report.get("failures", [])},
        "seconds": round(report.get("running_time", 0)),
    }
    (settings.VAR_DIR / f"schemathesis-{role}.json").write_text(json.dumps(figures, indent=1))
    with capsys.disabled():
        print(f"\nschemathesis (seed {SEED}, {MAX_EXAMPLES} examples) as {role}: {figures}")
    failed = [f for f in report.get("failures", []) if f["type"] not in LENIENCY]
    lenient = [f"{f['code']} {f['title']}: {', '.join(f['operations'])}" for f in report.get("failures", [])]
    assert report, f"Schemathesis as {role} wrote no report (exit {status}):\n{output[-20000:]}"
    assert not failed, f"Schemathesis as {role} (seed {SEED}):\n{output[-20000:]}"
    assert not report["errors"], f"Schemathesis as {role} (seed {SEED}):\n{output[-20000:]}"
    assert report["operations"]["tested"] > 50, report["operations"]
    assert len(api_requests) > (5000 if "coverage" in PHASES[role] else 300), figures
    if lenient:
        with capsys.disabled():
            print("  reported, not failed: " + "; ".join(lenient))
