"""The client under test for the official MCP conformance suite: ``longcall call``.

The suite (``conformance client --command "<this>" ...``) starts a scenario's mock server,
then runs this script with the server URL as its last argument, the scenario name in
``MCP_CONFORMANCE_SCENARIO``, the wire version to speak in
``MCP_CONFORMANCE_PROTOCOL_VERSION`` and scenario data (tool arguments, credentials) in
``MCP_CONFORMANCE_CONTEXT``. It judges the client by what reached the mock server and by
this script's exit code.

What this script owns is only what the suite leaves to "the client": which tools to call
with which arguments (a model or a person decides that in an MCP host; here a table per
scenario, from the scenario's own source), and what counts as the client having finished.
Every request on the wire is ``longcall``'s own: each step runs ``longcall call URL TOOL
--args … --wait --json --protocol VERSION`` as a separate process on a temporary ledger
of this run. It must not talk MCP itself.

A scenario that hands over an OAuth client registered beforehand (``client_id`` with a
``client_secret`` or a ``private_key_pem`` in the context) is configured as a user would
configure it: a servers file naming the server's URL with that client, the secret in an
environment variable, the key in a 0600 file. The grant is the scenario's: client
credentials for ``auth/client-credentials-*``, the authorization code otherwise.

Exit code: 0 when every step ended as the scenario expects, else the first failing step's
code. A step with ``tool=None`` only negotiates and lists tools (``longcall call`` of a
tool the server does not list ends in the "does not list tool" refusal once tools/list
has been answered; scenarios whose mock serves no callable tool expect exactly that).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from types import FrameType
from typing import Any

UNLISTED_TOOL = "longcall-conformance-unlisted-tool"
REFUSED = 5
"""``longcall``'s documented exit code for a refused call (``longcall --help``)."""
STEP_LIMIT_S = float(os.environ.get("LONGCALL_CONFORMANCE_STEP_LIMIT_S") or 20.0)
"""Each ``longcall call`` is killed past this (set it below the suite's --timeout)."""


@dataclass(frozen=True)
class Step:
    """One ``longcall call``: ``tool`` None only negotiates and lists tools; ``refused``
    says the client is expected to refuse the tool (exit 5) without calling it."""

    tool: str | None
    arguments: dict[str, Any] = field(default_factory=dict)
    refused: bool = False


AUTH = (Step("test-tool"),)
"""Every auth scenario serves one protected tool; the client must obtain a token first."""

INVALID_HEADER_TOOLS = (
    "invalid_space_in_name",
    "invalid_colon_in_name",
    "invalid_non_ascii_name",
    "invalid_control_char_name",
)

PLANS: dict[str, tuple[Step, ...]] = {
    "initialize": (Step(None),),
    "tools_call": (Step("add_numbers", {"a": 2, "b": 3}),),
    "sse-retry": (Step("test_reconnection"),),
    "elicitation-sep1034-client-defaults": (Step("test_client_elicitation_defaults"),),
    "request-metadata": (Step(None),),
    "json-schema-ref-no-deref": (Step(None),),
    "http-standard-headers": (Step("test_headers"), Step("my-hyphenated-tool")),
    "http-invalid-tool-headers": (
        Step("valid_tool", {"region": "us-west1"}),
        *(Step(name, {"region": "us-west1"}, refused=True) for name in INVALID_HEADER_TOOLS),
    ),
    "sep-2322-client-request-state": (
        Step("test_mrtr_echo_state"),
        Step("test_mrtr_no_state"),
        Step("test_mrtr_unrelated"),
        Step("test_mrtr_no_result_type"),
    ),
}


def plan(scenario: str, context: dict[str, Any]) -> tuple[Step, ...]:
    """The steps of ``scenario``; tool calls the suite hands over in the context win."""
    calls = context.get("toolCalls")
    if isinstance(calls, list) and calls:
        return tuple(Step(str(c["name"]), dict(c.get("arguments") or {})) for c in calls)
    if scenario.startswith("auth/"):
        return AUTH
    return PLANS.get(scenario, (Step(None),))


CLIENT_SECRET_ENV = "LONGCALL_CONFORMANCE_CLIENT_SECRET"


def configure_client(url: str, scenario: str, context: dict[str, Any], scratch: str) -> None:
    """A servers file for a scenario's pre-registered OAuth client, named by
    ``$LONGCALL_SERVERS`` for the steps (nothing when the context names no client)."""
    client_id = context.get("client_id")
    if not isinstance(client_id, str):
        return
    auth = {"type": "oauth", "client_id": client_id}
    if scenario.startswith("auth/client-credentials"):
        auth["grant"] = "client_credentials"
    if isinstance(context.get("issuer"), str):
        auth["issuer"] = context["issuer"]
    if isinstance(context.get("private_key_pem"), str):
        key = os.path.join(scratch, "client-key.pem")
        with open(os.open(key, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600), "w") as handle:
            handle.write(context["private_key_pem"])
        auth["private_key_file"] = key
        auth["signing_algorithm"] = str(context.get("signing_algorithm") or "ES256")
    elif isinstance(context.get("client_secret"), str):
        os.environ[CLIENT_SECRET_ENV] = context["client_secret"]
        auth["client_secret_env"] = CLIENT_SECRET_ENV
    fields = ", ".join(f"{key} = {json.dumps(value)}" for key, value in auth.items())
    servers = os.path.join(scratch, "servers.toml")
    with open(servers, "w", encoding="utf-8") as handle:
        handle.write(f"[servers.conformance]\nurl = {json.dumps(url)}\nauth = {{ {fields} }}\n")
    os.environ["LONGCALL_SERVERS"] = servers


def run_step(url: str, index: int, step: Step, version: str | None, ledger: str) -> int:
    """Run one ``longcall call``; 0 when it ended as the step expects."""
    tool = step.tool or UNLISTED_TOOL
    argv = [
        sys.executable, "-m", "longcall", "call", url, tool,
        "--args", json.dumps(step.arguments), "--node", f"step-{index}",
        "--ledger", ledger, "--wait", "--json",
    ]  # fmt: skip
    if version:
        argv += ["--protocol", version]
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=STEP_LIMIT_S)
    except subprocess.TimeoutExpired as exc:
        print(json.dumps({"step": index, "tool": tool, "timeout_s": STEP_LIMIT_S}), flush=True)
        sys.stderr.write(exc.stderr.decode() if isinstance(exc.stderr, bytes) else exc.stderr or "")
        return 124
    print(json.dumps({"step": index, "tool": tool, "exit": done.returncode}), flush=True)
    sys.stdout.write(done.stdout)
    sys.stderr.write(done.stderr)
    if step.tool is None:
        listed_only = done.returncode == REFUSED and "does not list tool" in " ".join(
            done.stderr.split()
        )
        return 0 if listed_only else (done.returncode or 1)
    if step.refused:
        return 0 if done.returncode == REFUSED else 1
    return done.returncode


def stop_on_sigterm(_signal: int, _frame: FrameType | None) -> None:
    """The suite kills a client that outlives its --timeout: end the running step with it
    (``subprocess.run`` kills its child when the exception unwinds through it)."""
    raise SystemExit(143)


def main() -> int:
    signal.signal(signal.SIGTERM, stop_on_sigterm)
    url = sys.argv[-1]
    scenario = os.environ.get("MCP_CONFORMANCE_SCENARIO", "")
    version = os.environ.get("MCP_CONFORMANCE_PROTOCOL_VERSION") or None
    context = json.loads(os.environ.get("MCP_CONFORMANCE_CONTEXT") or "{}")
    with tempfile.TemporaryDirectory(prefix="longcall-conformance-") as scratch:
        ledger = f"sqlite:///{scratch}/ledger.db"
        # OAuth tokens and client registrations of this run only: every scenario is a
        # fresh authorization server, possibly on a port an earlier one used.
        os.environ["LONGCALL_TOKEN_DIR"] = f"{scratch}/oauth"
        configure_client(url, scenario, context, scratch)
        first_failure = 0
        for index, step in enumerate(plan(scenario, context)):
            code = run_step(url, index, step, version, ledger)
            first_failure = first_failure or code
        return first_failure


if __name__ == "__main__":
    sys.exit(main())
