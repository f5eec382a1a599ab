"""A create the server refuses unread (over its body limit, unparseable) ends the call:
a terminal error that names the limit, never an operator's task, and an operator's
``never_created`` that would only repeat the refusal is refused saying so (X2, X7, X9)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import anyio
import pytest
from tests.bounds import LOADED_MACHINE_S
from tests.e2e.conftest import serve

from longcall import CallOutcome, Client, State
from longcall.core import events as e
from longcall.errors import NotReconcilable
from longcall.ledger import SQLiteLedger
from longcall.runtime.step import apply_event
from longcall.server import ServerOptions, build_reference_server

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

BOUND_S = LOADED_MACHINE_S
BODY_LIMIT = 4096


@pytest.fixture
async def small_server(tmp_path: Path) -> AsyncIterator[str]:
    """A reference server whose bodies are capped at 4 KiB and nesting at 8 levels, with a
    tool that takes any object (so the caller's own schema check lets the request go)."""
    server = build_reference_server(
        store=f"sqlite:///{tmp_path / 'tasks.db'}",
        options=ServerOptions(max_body_bytes=BODY_LIMIT, max_json_depth=8),
    )

    @server.tool(task="optional", idempotent=True)
    async def keep(payload: dict[str, Any]) -> dict[str, Any]:
        return payload

    async with serve(server.asgi_app()) as url:
        yield url


@pytest.mark.parametrize("version", ["2026-07-28", "2025-11-25"])
async def test_an_oversized_create_is_a_terminal_error_naming_the_limit(
    small_server: str, tmp_path: Path, version: str
) -> None:
    """HTTP 413 on the create: accepted as a protocol error that says the limit."""
    big = {"payload": {"pad": "x" * (2 * BODY_LIMIT)}}
    with anyio.fail_after(BOUND_S):
        async with Client(f"sqlite:///{tmp_path / 'l.db'}") as client:
            result = await client.call(small_server, "keep", big, protocol=version)
    assert (result.state, result.outcome) == (State.ACCEPTED, CallOutcome.PROTOCOL_ERROR)
    message = result.result["error"]["message"]
    assert "refused the request unread" in message
    assert f"over {BODY_LIMIT} bytes" in message
    assert result.result["error"]["http_status"] == 413
    assert result.record.last_error == message


async def test_an_unparseable_create_is_a_terminal_error(small_server: str, tmp_path: Path) -> None:
    """Arguments nested past the server's depth limit: a parse error, terminal at once."""
    deep: object = 1
    for _ in range(12):
        deep = {"d": deep}
    with anyio.fail_after(BOUND_S):
        async with Client(f"sqlite:///{tmp_path / 'l.db'}") as client:
            result = await client.call(small_server, "keep", {"payload": deep})
    assert (result.state, result.outcome) == (State.ACCEPTED, CallOutcome.PROTOCOL_ERROR)
    assert "nested deeper than 8" in result.result["error"]["message"]


async def test_never_created_that_repeats_a_refusal_is_refused(tmp_path: Path) -> None:
    """An operation escalated for a 413 (as older versions did): resubmitting is refused,
    with what to do instead, and the record is left as it was."""
    from tests.core.builders import T0, new_record

    path = tmp_path / "l.db"
    with SQLiteLedger(path) as ledger:
        record = ledger.create(new_record(call_node_id="n"))
        reason = "not retryable: submit failed (bad_request): HTTP 413: body over 4096 bytes"
        event = e.ReconciliationEscalated(reason=reason)
        record = apply_event(ledger, record, event, now=T0 + 1, jitter=0.5).record
        assert record.state is State.RECONCILIATION_REQUIRED
    async with Client(f"sqlite:///{path}") as client:
        with pytest.raises(NotReconcilable, match=r"refused the same way again.*as failed"):
            await client.reconcile("n", "never_created", note="retry", actor="op")
        assert client.result("n").state is State.RECONCILIATION_REQUIRED


def test_ops_reconcile_says_so_and_prints_json(tmp_path: Path) -> None:
    """From the command line: never_created refused (exit 5, what to do instead); the
    resolution it points to works, and --json prints the node after it."""
    import json

    from click.testing import CliRunner
    from tests.core.builders import T0, new_record

    from longcall.cli import main

    path = tmp_path / "l.db"
    with SQLiteLedger(path) as ledger:
        record = ledger.create(new_record(call_node_id="n"))
        reason = "not retryable: submit failed (refused_unread): HTTP 413: body over 4096 bytes"
        apply_event(
            ledger, record, e.ReconciliationEscalated(reason=reason), now=T0 + 1, jitter=0.5
        )
    base = ["ops", "reconcile", "n", "--note", "checked", "--ledger", f"sqlite:///{path}"]
    runner = CliRunner()
    refused = runner.invoke(main, [*base, "--as", "never_created"])
    assert refused.exit_code == 5, refused.output
    assert "would be refused the same way again: settle it as failed" in refused.output
    settled = runner.invoke(main, [*base, "--as", "failed", "--json"])
    assert settled.exit_code == 0, settled.output
    view = json.loads(settled.output)
    assert (view["call_node_id"], view["state"]) == ("n", "accepted")
