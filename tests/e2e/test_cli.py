"""The ``longcall`` command end to end: call, worker and ops against the reference server (O1)."""

from __future__ import annotations

import asyncio
import json
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from tests.e2e.conftest import FaultLayer, serve

from longcall.server import build_reference_server

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

CLI_TIMEOUT_S = 120.0


class Cli:
    def __init__(self, url: str, ledger: str) -> None:
        self.url = url
        self.ledger = ledger

    async def run(self, *args: str) -> tuple[int, str, str]:
        process = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "longcall", *args,
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        )  # fmt: skip
        async with asyncio.timeout(CLI_TIMEOUT_S):
            out, err = await process.communicate()
        assert process.returncode is not None
        return process.returncode, out.decode(), err.decode()

    async def call(
        self, tool: str, arguments: dict[str, Any], node: str, *more: str
    ) -> tuple[int, Any, str]:
        code, out, err = await self.run(
            "call", self.url, tool, "--args", json.dumps(arguments), "--node", node,
            "--ledger", self.ledger, "--json", *more,
        )  # fmt: skip
        return code, (json.loads(out) if out.strip() else None), err

    async def ops(self, *args: str) -> tuple[int, Any, str]:
        code, out, err = await self.run("ops", *args, "--ledger", self.ledger)
        try:
            data = json.loads(out)
        except ValueError:
            data = out
        return code, data, err


@pytest.fixture
async def cli(tmp_path: Path) -> AsyncIterator[tuple[Cli, FaultLayer]]:
    """A reference server in this process and the CLI as separate processes."""
    server = build_reference_server(store=f"sqlite:///{tmp_path / 'tasks.db'}")
    layer = FaultLayer(server.asgi_app())
    async with serve(layer) as url:
        yield Cli(url, f"sqlite:///{tmp_path / 'ledger.db'}"), layer


async def test_call_wait_json_prints_the_receipt(cli: tuple[Cli, FaultLayer]) -> None:
    """--wait --json prints the receipt fields and exits 0 for an accepted completion."""
    runner, layer = cli
    code, view, err = await runner.call("sleep_report", {"seconds": 0.3, "rows": 2}, "n1", "--wait")
    assert code == 0, err
    for field in ("call_node_id", "state", "server_status", "operation_id", "protocol",
                  "result", "result_digest", "warnings"):  # fmt: skip
        assert field in view
    assert (view["state"], view["server_status"], view["warnings"]) == ("accepted", "completed", [])
    assert view["result"]["structuredContent"]["rows"][1] == {"index": 1, "value": 1}
    again, view_again, _ = await runner.call(
        "sleep_report", {"seconds": 0.3, "rows": 2}, "n1", "--wait"
    )
    assert again == 0
    assert view_again["result_digest"] == view["result_digest"]
    assert layer.counts["tools/call"] == 1
    refused, _, err = await runner.call("sleep_report", {"seconds": 1, "rows": 2}, "n1", "--wait")
    assert refused == 3
    assert "different request" in err


async def test_exit_codes_and_warnings(cli: tuple[Cli, FaultLayer]) -> None:
    """A tool error exits non-zero; a zero-item success exits 0 with the empty_result warning."""
    runner, _ = cli
    code, view, _ = await runner.call("fail", {"kind": "tool"}, "bad", "--wait")
    assert code == 2
    assert view["result_kind"] == "tool_error"
    code, view, _ = await runner.call("crawl", {"pages": 0, "items_per_page": 3}, "zero", "--wait")
    assert code == 0
    assert view["warnings"] == ["empty_result"]


async def test_worker_ops_cancel_and_answer(cli: tuple[Cli, FaultLayer]) -> None:
    """Calls sent without --wait are driven by a worker; ops cancel and ops answer steer them."""
    runner, _ = cli
    code, view, err = await runner.call("sleep_report", {"seconds": 300, "rows": 1}, "long")
    assert code == 0, err
    assert view["state"] == "working"
    code, view, err = await runner.call("approve", {"change": "drop table"}, "gate")
    assert code == 0, err
    code, outcome, _ = await runner.ops("cancel", "long", "--json")
    assert (code, outcome["outcome"], outcome["cancel_generation"]) == (0, "requested", 1)
    worker = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "longcall", "worker", "--ledger", runner.ledger, "--until-idle",
        stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.DEVNULL,
    )  # fmt: skip
    try:
        async with asyncio.timeout(CLI_TIMEOUT_S):
            while True:  # bounded: the worker is another process writing the ledger
                _, shown, _ = await runner.ops("show", "gate", "--json")
                if shown["input_keys_pending"]:
                    break
                await asyncio.sleep(0.1)
        key = shown["input_keys_pending"][0]
        answer = json.dumps({"action": "accept", "content": {"approved": True}})
        code, _text, err = await runner.ops("answer", "gate", "--key", key, "--json", answer)
        assert code == 0, err
        async with asyncio.timeout(CLI_TIMEOUT_S):
            assert await worker.wait() == 0
    finally:
        if worker.returncode is None:
            worker.kill()
    _, listed, _ = await runner.ops("list", "--json")
    states = {item["call_node_id"]: item["state"] for item in listed}
    assert states == {"long": "cancelled_accepted", "gate": "accepted"}
    _, shown, _ = await runner.ops("show", "gate", "--json")
    assert shown["result"]["structuredContent"]["approved"] is True
    assert [h["event"] for h in shown["history"]][-1] == "ResultFetched"
