"""The official MCP conformance suite's client scenarios, with ``longcall call`` as the client.

Each case runs ``conformance client --scenario S --spec-version REV`` (the suite's own CLI,
``@modelcontextprotocol/conformance`` on Node 22) with ``conformance_client.py`` as the
client command, and asserts the suite's verdict for that scenario: its exit code (no
failed or warning check, the client neither timed out nor exited with an error) and its
``checks.json``. The scenarios are those the suite's requirement sets name for the client
leg of each revision we speak (``requirements/2025-11-25.yaml``, ``2026-07-28.yaml``), each
run at its revision's wire; :func:`test_every_scenario_of_the_requirement_sets_is_classified`
fails when a suite upgrade names one this table does not classify.

Where the caller fails today the case is ``xfail(strict=True)`` with the diagnosed cause; a
fix turns it into XPASS, which fails the run until the marker goes. The cases run
concurrently (a few at a time) the first time any of them is needed; every process runs
in its own process group, bounded, and every server listens on 127.0.0.1 only.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml
from tests.bounds import LOADED_MACHINE_S

from .harness import INTEROP, node_env, node_or_fail

# Each case is a test of its own, so the suite's workers share them out: one worker
# running them all (on a pool of its own) was the whole run's longest path.
pytestmark = pytest.mark.slow

SUITE = INTEROP / "node_modules" / "@modelcontextprotocol" / "conformance"
WRAPPER = Path(__file__).with_name("conformance_client.py")
LOOPBACK_ONLY = INTEROP / "loopback-only.mjs"
REVISIONS = ("2025-11-25", "2026-07-28")
STEP_LIMIT_S = LOADED_MACHINE_S
"""Each ``longcall call`` of a scenario; a call that completes takes about a second."""
RUNNER_TIMEOUT_MS = int(2 * LOADED_MACHINE_S * 1000)
"""The runner's bound on the client's whole run: a scenario of several steps starts one
``longcall call`` process per step, and each can take seconds to start on a loaded
machine (100 s was met once, with the load at ten times the cores)."""
RUN_LIMIT_S = 3 * LOADED_MACHINE_S


@dataclass(frozen=True)
class Case:
    revision: str
    scenario: str

    @property
    def id(self) -> str:
        return f"{self.revision}:{self.scenario}"


# --- what we expect, and why ---------------------------------------------------------------

CIMD = (
    "a URL-based client id (Client ID Metadata Document) needs an HTTPS URL where the "
    "client's metadata is published; the caller registers dynamically instead (the SDK's "
    "provider falls back to it), which this scenario grades as a WARNING"
)
PLAIN_CALL_ELICITATION = (
    "a plain (non-task) tools/call cannot answer an elicitation: the server's "
    "`elicitation/create` request on the tools/call event stream is ignored, the call gets "
    'no answer ("tools/call: no answer within 15 s") and goes to reconciliation; the '
    "caller has no way to answer inside a synchronous call"
)
MRTR = (
    'SEP-2322 input on a plain tools/call: the result `{resultType: "input_required", '
    'inputRequests: {confirm: elicitation/create}, requestState}` is read as "a task came '
    'back to a call that asked for none" (SubmitOutcomeLost, reconciliation_required); the '
    "call is never retried with inputResponses and the echoed requestState"
)

REQUIRED_AUTH = (
    "auth/metadata-default",
    "auth/metadata-var1",
    "auth/metadata-var2",
    "auth/metadata-var3",
    "auth/basic-cimd",
    "auth/scope-from-www-authenticate",
    "auth/scope-from-scopes-supported",
    "auth/scope-omitted-when-undefined",
    "auth/scope-step-up",
    "auth/scope-retry-limit",
    "auth/token-endpoint-auth-basic",
    "auth/token-endpoint-auth-post",
    "auth/token-endpoint-auth-none",
    "auth/pre-registration",
)
REQUIRED_AUTH_2026 = (
    "auth/resource-mismatch",
    "auth/offline-access-scope",
    "auth/offline-access-not-supported",
    "auth/authorization-server-migration",
    "auth/iss-supported",
    "auth/iss-not-advertised",
    "auth/iss-supported-missing",
    "auth/iss-wrong-issuer",
    "auth/iss-unexpected",
    "auth/iss-normalized",
    "auth/metadata-issuer-mismatch",
)
CLIENT_CREDENTIALS = ("auth/client-credentials-basic", "auth/client-credentials-jwt")
"""Extensions the suite does not score, run all the same: a headless caller is exactly
the client that machine-to-machine OAuth is for."""

FAILS: dict[Case, str] = {
    Case("2025-11-25", "elicitation-sep1034-client-defaults"): PLAIN_CALL_ELICITATION,
    Case("2026-07-28", "sep-2322-client-request-state"): MRTR,
    **{
        Case(revision, scenario): reason
        for revision in REVISIONS
        for scenario, reason in (("auth/basic-cimd", CIMD),)
    },
}
AUTH_PASSES = tuple(
    Case(revision, scenario)
    for revision, scenarios in (
        ("2025-11-25", REQUIRED_AUTH),
        ("2026-07-28", (*REQUIRED_AUTH, *REQUIRED_AUTH_2026)),
    )
    for scenario in (*scenarios, *CLIENT_CREDENTIALS)
    if scenario != "auth/basic-cimd"
)
"""OAuth 2.1 through the MCP SDK's client providers: started when a server asks for a
bearer token (headless: the mock authorization servers approve at once), or with the
client a scenario registered beforehand, configured in a servers file."""
PASSES = (
    *AUTH_PASSES,
    Case("2025-11-25", "initialize"),
    Case("2025-11-25", "tools_call"),
    Case("2025-11-25", "sse-retry"),
    Case("2026-07-28", "request-metadata"),
    Case("2026-07-28", "tools_call"),
    Case("2026-07-28", "http-standard-headers"),
    Case("2026-07-28", "http-custom-headers"),
    Case("2026-07-28", "http-invalid-tool-headers"),
    Case("2026-07-28", "json-schema-ref-no-deref"),
)
NOT_APPLICABLE: dict[str, str] = {
    "json-schema-2020-12-preservation": (
        "the client must call an echo tool with the inputSchema it observed in tools/list as "
        "arguments: a host's (model's) choice of arguments, not a caller's; `longcall call` "
        "takes its arguments from its user and never rewrites a listed schema"
    ),
    "auth/enterprise-managed-authorization": (
        "optional extension (not scored): enterprise identity-provider token exchange, "
        "outside what the caller offers or plans"
    ),
    "auth/dpop": "optional extension (not scored): DPoP proof-of-possession tokens",
    "auth/dpop-nonce": "optional extension (not scored): DPoP with server nonces",
    "auth/wif-jwt-bearer": (
        "optional extension (not scored): workload identity federation (JWT bearer grant)"
    ),
}

CASES = [
    *(pytest.param(case, id=case.id) for case in PASSES),
    *(
        pytest.param(
            case,
            id=case.id,
            marks=pytest.mark.xfail(strict=True, raises=AssertionError, reason=reason),
        )
        for case, reason in FAILS.items()
    ),
]


# --- running the suite ---------------------------------------------------------------------


@dataclass(frozen=True)
class Verdict:
    """What the suite said about one scenario run."""

    exit_code: int
    checks: list[dict[str, Any]]
    client_stdout: str
    client_stderr: str
    runner_output: str

    def failing(self) -> list[str]:
        return [
            f"{c.get('status')} {c.get('id')}: {c.get('errorMessage') or c.get('description')}"
            for c in self.checks
            if c.get("status") in ("FAILURE", "WARNING")
        ]

    def explain(self) -> str:
        return "\n".join(
            [
                f"runner exit {self.exit_code}; failing checks:",
                *self.failing(),
                "client stdout (tail):",
                self.client_stdout[-1500:],
                "client stderr (tail):",
                self.client_stderr[-1500:],
                "runner output (tail):",
                self.runner_output[-1500:],
            ]
        )


def run_scenario(case: Case, out_dir: Path) -> Verdict:
    """One ``conformance client`` run, bounded; its process group is killed past the limit."""
    node = node_or_fail()
    command = f"{sys.executable} {WRAPPER}"
    if " " in str(sys.executable) or " " in str(WRAPPER):
        pytest.fail(f"the suite splits its --command on spaces; a path has one: {command}")
    env = {
        **node_env(),
        "NODE_OPTIONS": f"--import={LOOPBACK_ONLY}",
        "LONGCALL_CONFORMANCE_STEP_LIMIT_S": str(STEP_LIMIT_S),
    }
    argv = [
        str(node), str(SUITE / "dist" / "index.js"), "client",
        "--command", command,
        "--scenario", case.scenario,
        "--spec-version", case.revision,
        "--timeout", str(RUNNER_TIMEOUT_MS),
        "-o", str(out_dir),
    ]  # fmt: skip
    if case.scenario in CLIENT_CREDENTIALS:
        # An extension is on no revision's timeline: the suite skips it unless forced.
        # It is run at each revision's wire all the same (the caller speaks both).
        argv.append("--force")
    process = subprocess.Popen(
        argv,
        cwd=INTEROP,
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    try:
        output, _ = process.communicate(timeout=RUN_LIMIT_S)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        output, _ = process.communicate()
    results = sorted(out_dir.rglob("checks.json"))
    result_dir = results[0].parent if results else None
    return Verdict(
        exit_code=process.returncode,
        checks=json.loads(results[0].read_text()) if results else [],
        client_stdout=(result_dir / "stdout.txt").read_text() if result_dir else "",
        client_stderr=(result_dir / "stderr.txt").read_text() if result_dir else "",
        runner_output=output,
    )


@pytest.mark.parametrize("case", CASES)
def test_client_scenario(case: Case, tmp_path: Path) -> None:
    """The suite's client scenario passes with ``longcall call`` as the client."""
    verdict = run_scenario(case, tmp_path)
    assert verdict.checks, "the suite recorded no checks:\n" + verdict.explain()
    assert verdict.exit_code == 0, verdict.explain()
    assert not verdict.failing(), verdict.explain()


def test_every_scenario_of_the_requirement_sets_is_classified() -> None:
    """Each client scenario a requirement set names (scored or not) is run here at that
    revision, or named not applicable with a reason; nothing is left out silently."""
    classified = {case.id for case in PASSES} | {case.id for case in FAILS}
    missing = []
    for revision in REVISIONS:
        requirements = yaml.safe_load((SUITE / "requirements" / f"{revision}.yaml").read_text())
        named = list(requirements.get("client") or [])
        named += [
            entry["scenario"]
            for entry in requirements.get("not_scored") or []
            if entry.get("leg") == "client"
        ]
        missing += [
            f"{revision}:{scenario}"
            for scenario in named
            if f"{revision}:{scenario}" not in classified and scenario not in NOT_APPLICABLE
        ]
    assert not missing, f"client scenarios neither run nor named not applicable: {missing}"
    assert not set(NOT_APPLICABLE) & {case.scenario for case in (*PASSES, *FAILS)}
