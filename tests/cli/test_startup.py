"""The command starts without loading what it may not need: the read-only commands and
``--help`` never import the protocol adapters or the MCP SDK (a few seconds each time)."""

from __future__ import annotations

import subprocess
import sys

from tests.bounds import LOADED_MACHINE_S

HEAVY = ("mcp", "longcall.runtime.executor", "longcall.adapters.routing", "jsonschema")


def test_importing_the_command_and_the_client_loads_no_protocol_stack() -> None:
    """``import longcall.cli`` (and the client) leaves the MCP SDK and adapters unloaded."""
    probe = (
        "import sys, longcall.cli, longcall.client, longcall\n"
        "longcall.Client\n"
        f"print([m for m in {HEAVY!r} if m in sys.modules])\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe],
        capture_output=True,
        text=True,
        timeout=LOADED_MACHINE_S,
        check=True,
    )
    assert done.stdout.strip() == "[]", done.stdout
