"""``longcall.Client`` end to end against the reference server over HTTP on 127.0.0.1:
typed results, one submission per call node, input through a callback or a person, and
waits that always end (X2, X4, X5, X6, X8, X11)."""

from __future__ import annotations

import asyncio
import dataclasses
import math
import socket
import sqlite3
from pathlib import Path
from typing import Any

import anyio
import pytest
from tests.bounds import LOADED_MACHINE_S
from tests.client.conftest import Peer
from tests.e2e.conftest import Fault

from longcall import (
    CallNodeConflict,
    CallOutcome,
    Client,
    ClientNotStarted,
    DriverStopped,
    InputRequest,
    InvalidAnswer,
    InvalidArguments,
    Progress,
    ServerUnreachable,
    State,
)
from longcall.core import RequestDigestMismatch
from longcall.core import events as e
from longcall.errors import UnknownCallNode, VersionConflict
from longcall.ledger import SQLiteLedger
from longcall.runtime.step import apply_event

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

VERSIONS = ["2026-07-28", "2025-11-25"]
BOUND_S = LOADED_MACHINE_S


async def test_a_call_returns_a_typed_ok_result_and_attaches_on_the_same_node(peer: Peer) -> None:
    """The result carries state, outcome, value and receipt; the same call again attaches
    (no second create); anything else on that node is refused (X2)."""
    args = {"seconds": 0.3, "rows": 2}
    with anyio.fail_after(BOUND_S):
        async with Client(peer.ledger) as client:
            result = await client.call(peer.url, "sleep_report", args, node="n1")
            assert result.ok
            assert (result.outcome, result.state) == (CallOutcome.OK, State.ACCEPTED)
            assert result.result["structuredContent"]["rows"][1] == {"index": 1, "value": 1}
            assert result.receipt is not None
            assert result.receipt.result_digest == result.to_json()["result_digest"]
            assert result.operation_id
            assert result.warnings == ()
            again = await client.call(peer.url, "sleep_report", args, node="n1")
            assert again.receipt == result.receipt
            with pytest.raises(RequestDigestMismatch):
                await client.call(peer.url, "sleep_report", {**args, "rows": 3}, node="n1")
            with pytest.raises(CallNodeConflict, match="was called at"):
                await client.call(peer.base + "/other/mcp", "sleep_report", args, node="n1")
            with pytest.raises(CallNodeConflict, match="bound to protocol"):
                await client.call(peer.url, "sleep_report", args, node="n1", protocol="aip-151")
    assert peer.faults.counts["tools/call"] == 1


async def test_outcome_kinds_stay_distinct(peer: Peer) -> None:
    """Tool error, protocol error, cancelled and a zero-item success (a warning) (X5, X6)."""
    with anyio.fail_after(BOUND_S):
        async with Client(peer.ledger) as client:
            tool = await client.call(peer.url, "fail", {"kind": "tool"})
            protocol = await client.call(peer.url, "fail", {"kind": "protocol"})
            empty = await client.call(peer.url, "crawl", {"pages": 0, "items_per_page": 2})
            long = await client.call(
                peer.url, "sleep_report", {"seconds": 300, "rows": 1}, node="long", wait=False
            )
            assert (long.outcome, long.state) == (CallOutcome.PENDING, State.WORKING)
            cancel = await client.cancel("long")
            assert (cancel.outcome, cancel.cancel_generation) == ("requested", 1)
            cancelled = await client.wait("long")
    assert tool.outcome is CallOutcome.TOOL_ERROR
    assert not tool.ok
    assert protocol.outcome is CallOutcome.PROTOCOL_ERROR
    assert (empty.outcome, empty.warnings) == (CallOutcome.OK, ("empty_result",))
    assert (cancelled.outcome, cancelled.state) == (CallOutcome.CANCELLED, State.CANCELLED_ACCEPTED)


@pytest.mark.parametrize("version", VERSIONS)
async def test_an_input_callback_sees_the_question_and_answers_it(peer: Peer, version: str) -> None:
    """The callback gets the server's question and form; its answer completes the call (X4)."""
    asked: list[InputRequest] = []

    async def on_input(request: InputRequest) -> dict[str, Any]:
        asked.append(request)
        return request.accept(approved=True)

    with anyio.fail_after(BOUND_S):
        async with Client(peer.ledger, on_input=on_input) as client:
            result = await client.call(
                peer.url, "approve", {"change": "rotate keys"}, protocol=version
            )
    assert result.ok, result.reason
    assert result.result["structuredContent"] == {"change": "rotate keys", "approved": True}
    (request,) = asked
    (question,) = request.questions
    assert question.message == "Approve this change? rotate keys"
    assert [(f.name, f.type, f.required) for f in question.fields] == [
        ("approved", "boolean", True)
    ]


@pytest.mark.parametrize("version", VERSIONS)
async def test_without_a_callback_a_person_answers_by_field(peer: Peer, version: str) -> None:
    """The wait ends with NEEDS_PERSON and the question; a wrong-shaped answer is refused
    before anything is sent; an answer by field name completes the call (X4)."""
    with anyio.fail_after(BOUND_S):
        async with Client(peer.ledger) as client:
            waiting = await client.call(
                peer.url, "approve", {"change": "drop table"}, node="gate", protocol=version
            )
            assert (waiting.outcome, waiting.state) == (
                CallOutcome.NEEDS_PERSON,
                State.INPUT_REQUIRED,
            )
            assert waiting.input is not None
            assert waiting.input.questions[0].message == "Approve this change? drop table"
            sent_before = dict(peer.faults.counts)
            for wrong in ({"approved": "maybe"}, {"aproved": "true"}):
                with pytest.raises(InvalidAnswer):
                    await client.answer("gate", fields=wrong)
            key = waiting.input.keys[0]
            with pytest.raises(InvalidAnswer):
                await client.answer("gate", {key: {"action": "accept", "content": {}}})
            assert peer.faults.counts == sent_before
            assert client.result("gate").record.version == waiting.record.version
            await client.answer("gate", fields={"approved": "true"})
            done = await client.wait("gate")
    assert done.ok, done.reason
    assert done.result["structuredContent"]["approved"] is True


async def test_waiting_through_input_takes_an_answer_written_elsewhere(peer: Peer) -> None:
    """With through_input, a wait goes on while a person answers through another client
    (another ledger connection, as another process would); the running driver picks the
    answer up and completes the call (X4)."""
    asked = asyncio.Event()

    async def note(request: InputRequest) -> None:
        asked.set()

    with anyio.fail_after(BOUND_S):
        async with Client(peer.ledger, on_input=note) as driving:
            waiting = asyncio.ensure_future(
                driving.call(peer.url, "approve", {"change": "y"}, node="gate", through_input=True)
            )
            await asyncio.wait({asyncio.ensure_future(asked.wait()), waiting},
                               return_when=asyncio.FIRST_COMPLETED)  # fmt: skip
            assert not waiting.done()
            elsewhere = Client(peer.ledger)
            try:
                await elsewhere.answer("gate", fields={"approved": "true"})
            finally:
                elsewhere.close()
            done = await waiting
    assert done.ok, done.reason
    assert done.result["structuredContent"] == {"change": "y", "approved": True}


async def test_a_server_refused_answer_leaves_the_round_answerable(peer: Peer) -> None:
    """The server refusing a delivered answer opens the same question again (a new
    round), instead of sending the operation to an operator (X4)."""
    peer.faults.faults.append(Fault(method="tasks/update", nth=(1,), status=400))
    with anyio.fail_after(BOUND_S):
        async with Client(peer.ledger) as client:
            waiting = await client.call(peer.url, "approve", {"change": "x"}, node="gate")
            assert waiting.input is not None
            assert waiting.input.input_round == 1
            await client.answer("gate", fields={"approved": "true"})
            again = await client.wait("gate")
            assert again.outcome is CallOutcome.NEEDS_PERSON, again.to_json()
            assert again.input is not None
            assert (again.input.input_round, again.input.keys) == (2, waiting.input.keys)
            assert "refused" in (again.reason or "")
            await client.answer("gate", fields={"approved": "false"})
            done = await client.wait("gate")
    assert done.ok, done.reason
    assert done.result["structuredContent"]["approved"] is False
    assert peer.faults.counts["tasks/update"] == 2


async def test_progress_reports_a_fraction(peer: Peer) -> None:
    """Progress reaches the callback with a fraction in (0, 1] (X11)."""
    seen: list[Progress] = []
    with anyio.fail_after(BOUND_S):
        async with Client(peer.ledger, on_progress=seen.append) as client:
            result = await client.call(peer.url, "sleep_report", {"seconds": 1.5, "rows": 1})
    assert result.ok
    fractions = [p.fraction for p in seen if p.fraction is not None]
    assert fractions
    assert all(0 < f <= 1 for f in fractions)
    assert all(p.call_node_id == result.call_node_id for p in seen)


async def test_progress_says_when_the_server_is_unreachable(peer: Peer) -> None:
    """Failing polls are reported as server_unreachable, and the recovery too (X3, X11)."""
    peer.faults.faults.append(Fault(method="tasks/get", nth=(1, 2), status=503))
    seen: list[Progress] = []
    with anyio.fail_after(BOUND_S):
        async with Client(peer.ledger, on_progress=seen.append) as client:
            result = await client.call(peer.url, "sleep_report", {"seconds": 0.5, "rows": 1})
    assert result.ok
    flags = [p.server_unreachable for p in seen if p.server_unreachable or p.fraction is None]
    assert True in flags
    assert flags[flags.index(True) :].count(False) >= 1
    (down,) = [p for p in seen if p.server_unreachable][:1]
    assert "503" in (down.message or "")


async def test_waiting_on_a_node_in_reconciliation_returns_at_once(peer: Peer) -> None:
    """A node waiting for an operator ends the wait with NEEDS_PERSON and the reason,
    instead of hanging (it used to spin silently)."""
    with anyio.fail_after(BOUND_S):
        async with Client(peer.ledger) as client:
            await client.call(
                peer.url, "sleep_report", {"seconds": 300, "rows": 1}, node="n", wait=False
            )
            record = client.ledger.get("n")
        async with Client(peer.ledger) as client:
            escalated = e.ReconciliationEscalated(reason="checked by hand")
            apply_event(client.ledger, record, escalated, now=record.updated_at, jitter=0.5)
            result = await client.wait("n")
    assert (result.outcome, result.state) == (
        CallOutcome.NEEDS_PERSON,
        State.RECONCILIATION_REQUIRED,
    )
    assert result.reason == "checked by hand"


class FailingDisk(SQLiteLedger):
    """A real SQLite ledger whose disk starts failing writes when told to (a fault
    injected under the driver, like a full or broken disk)."""

    failing = False

    def update(self, record: Any, *, expected_version: int, event: str, **more: Any) -> None:
        if self.failing:
            raise sqlite3.OperationalError("disk I/O error")
        super().update(record, expected_version=expected_version, event=event, **more)


async def test_a_failing_driver_ends_every_wait_with_an_error(peer: Peer, tmp_path: Path) -> None:
    """Whatever escapes the executor loop ends the waits with DriverStopped (here the
    ledger's disk fails under a running call), never a hang."""
    ledger = FailingDisk(tmp_path / "failing.db")
    try:
        with anyio.fail_after(BOUND_S):
            async with Client(ledger) as client:
                await client.call(
                    peer.url, "sleep_report", {"seconds": 300, "rows": 1}, node="n", wait=False
                )
                ledger.failing = True  # the next poll reply's write fails under the driver
                with pytest.raises(DriverStopped, match="disk I/O error"):
                    await client.wait("n")
                with pytest.raises(DriverStopped):
                    await client.wait("n")
    finally:
        ledger.close()


async def test_misuse_and_bad_input_get_typed_errors(peer: Peer) -> None:
    """No driver, a zero poll rate, non-JSON arguments and a closed port each raise a
    typed error, and none of them records anything."""
    with pytest.raises(ValueError, match="poll_qps_max"):
        Client(peer.ledger, poll_qps_max=0)
    client = Client(peer.ledger)
    with pytest.raises(ClientNotStarted):
        await client.call(peer.url, "echo", {"text": "x"})
    client.close()
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        closed_port = sock.getsockname()[1]
    with anyio.fail_after(BOUND_S):
        async with Client(peer.ledger) as client:
            for bad in ({"x": math.nan}, {"x": "\ud800"}, {"x": _nested(5000)}):
                with pytest.raises(InvalidArguments):
                    await client.call(peer.url, "echo", bad)
            with pytest.raises(ServerUnreachable, match="refused"):
                await client.call(f"http://127.0.0.1:{closed_port}/mcp", "echo", {"text": "x"})
            assert client.results() == []


def _nested(depth: int) -> Any:
    value: Any = 1
    for _ in range(depth):
        value = [value]
    return value


async def test_calls_made_together_share_one_tools_list_and_a_later_call_takes_its_listing(
    peer: Peer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two concurrent calls to one tool await one ``tools/list``; a call made after it
    finished takes that listing: the server offers the lookup by submission key (a lost
    create is looked up, never resent on the idempotency hint) and the tool is not
    read-only, so no hint in it can age into a wrong decision (X1, X2). Arguments that
    listing refuses are refused only once a fresh listing refuses them too."""
    inner = peer.faults.inner
    both_binding = asyncio.Event()

    async def held_tools_list(scope: Any, receive: Any, send: Any) -> None:
        message = await receive()
        if b'"tools/list"' in message.get("body", b""):
            await both_binding.wait()  # released once both calls ask for the binding
        replayed = False

        async def replay() -> Any:
            nonlocal replayed
            if replayed:
                return await receive()
            replayed = True
            return message

        await inner(scope, replay, send)

    peer.faults.inner = held_tools_list
    args = {"seconds": 0.05, "rows": 1}
    with anyio.fail_after(BOUND_S):
        async with Client(peer.ledger) as client:
            original, entered = client._bind, []

            async def counting_bind(*a: Any) -> Any:
                entered.append(a)
                if len(entered) == 2:
                    both_binding.set()
                return await original(*a)

            monkeypatch.setattr(client, "_bind", counting_bind)
            before = peer.faults.counts.get("tools/list", 0)
            first, second = await asyncio.gather(
                client.call(peer.url, "sleep_report", args, node="a"),
                client.call(peer.url, "sleep_report", args, node="b"),
            )
            assert first.ok
            assert second.ok
            assert peer.faults.counts["tools/list"] - before == 1
            later = await client.call(peer.url, "sleep_report", args, node="c")
            assert later.ok
            assert peer.faults.counts["tools/list"] - before == 1
            with pytest.raises(InvalidArguments):
                await client.call(peer.url, "sleep_report", {"seconds": -1, "rows": 1}, node="d")
            assert peer.faults.counts["tools/list"] - before == 2
            with pytest.raises(UnknownCallNode):
                client.result("d")  # nothing was recorded


async def test_an_operator_write_with_an_expected_version_never_lands_on_a_newer_row(
    peer: Peer,
) -> None:
    """With ``expected_version``, an answer or cancel on a row that moved on since it was
    read is refused (VersionConflict) and writes nothing; at the right version it lands."""
    with anyio.fail_after(BOUND_S):
        async with Client(peer.ledger) as client:
            waiting = await client.call(peer.url, "approve", {"change": "z"}, node="gate")
            assert waiting.input is not None
        operator = Client(peer.ledger)
        try:
            ledger = operator.ledger
            seen = ledger.get("gate")
            moved = dataclasses.replace(seen, version=seen.version + 1)
            ledger.update(moved, expected_version=seen.version, event="PollScheduled")
            before = len(ledger.history("gate"))
            with pytest.raises(VersionConflict):
                await operator.answer(
                    "gate", fields={"approved": "true"}, expected_version=seen.version
                )
            with pytest.raises(VersionConflict):
                await operator.cancel("gate", expected_version=seen.version)
            assert len(ledger.history("gate")) == before
            assert ledger.get("gate").input_keys_pending == seen.input_keys_pending
            await operator.cancel("gate", expected_version=moved.version)
            assert ledger.get("gate").cancel_generation == seen.cancel_generation + 1
        finally:
            operator.close()
