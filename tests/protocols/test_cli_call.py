"""``longcall call`` with one command shape for MCP, AIP-151 and Apify-style URLs (O1, P3, P4)."""

from __future__ import annotations

import json
from pathlib import Path

import anyio
import pytest
from click.testing import CliRunner
from tests.bounds import LOADED_MACHINE_S

from longcall.adapters.routing import protocol_of_url
from longcall.cli import main

pytestmark = pytest.mark.anyio


@pytest.mark.parametrize(
    ("path", "tool", "protocol"),
    [
        ("/v1", "sleep_report", "aip-151"),
        ("/apify/mcp", "longcall--sleep-report", "apify"),
        ("/mcp", "sleep_report", None),
    ],
)
async def test_one_command_shape_for_three_protocols(
    tmp_path: Path, reference_base: str, path: str, tool: str, protocol: str | None
) -> None:
    """The protocol comes from the URL; the same command drives each to an accepted receipt."""
    url = reference_base + path
    args = [
        "call",
        url,
        tool,
        "--args",
        json.dumps({"seconds": 0.2, "rows": 2}),
        "--ledger",
        f"sqlite:///{tmp_path / 'ledger.db'}",
        "--wait",
        "--json",
    ]

    def invoke() -> tuple[int, str]:
        result = CliRunner().invoke(main, args, catch_exceptions=False)
        return result.exit_code, result.stdout

    with anyio.fail_after(LOADED_MACHINE_S):
        code, out = await anyio.to_thread.run_sync(invoke)
    assert code == 0, out
    view = json.loads(out)
    assert view["state"] == "accepted"
    if protocol is not None:
        assert view["protocol"] == protocol
        assert protocol_of_url(url) == protocol


def test_protocol_of_url() -> None:
    """Discovery by path: /v1 → AIP-151, /apify/mcp → Apify, anything else → MCP."""
    assert protocol_of_url("http://h:1/v1") == "aip-151"
    assert protocol_of_url("http://h:1/v1/operations") == "aip-151"
    assert protocol_of_url("http://h:1/apify/mcp") == "apify"
    assert protocol_of_url("http://h:1/mcp") == "mcp"
