"""The caller against the official TypeScript MCP SDK as a 2025-11-25 task server.

The peer (``interop/task-peer.mjs``: ``@modelcontextprotocol/sdk`` 1.32.2 on Node 22) runs
stateful (sessions) and stateless; the caller is the real ``longcall`` command in separate
processes on a temporary ``LONGCALL_LEDGER``, or the executor in this process where a test
needs an input policy. The peer prints one event per task execution, so "never runs a node
twice" is counted where the work runs, not read from our own ledger.

The peer's trace of every HTTP exchange is in each failure message.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from tests.bounds import LOADED_MACHINE_S

from longcall.core import OperationRecord, ResultKind, State
from longcall.ledger import SQLiteLedger
from longcall.runtime.engine import CallSpec
from longcall.runtime.executor import Executor

from .harness import (
    PEER_LIFETIME_S,
    Caller,
    TsPeer,
    call_args,
    finish,
    stop,
    ts_peer,
    view_of,
)

pytestmark = pytest.mark.slow

STATEFUL = "stateful"
STATELESS = "stateless"
FLAGS = {STATEFUL: (), STATELESS: ("--stateless",)}
SETTLE_LIMIT_S = LOADED_MACHINE_S
WORKER_EXIT_GRACE_S = 30.0
UNTIL_CANCELLED_MS = (PEER_LIFETIME_S + 60) * 1000
"""A ``linger`` longer than the peer lives: the task ends when the test cancels it, never
first by itself however slowly a busy machine carries the cancel."""
NOT_OK = 3
"""``longcall``'s documented exit code for an accepted outcome that is not ok (a tool error,
a protocol error, a cancel): ``longcall --help``."""


def modes() -> list[Any]:
    """Both peer modes."""
    return [pytest.param(mode, id=mode) for mode in (STATEFUL, STATELESS)]


# --- fixtures ---------------------------------------------------------------------------------


class Peers:
    """One TypeScript peer per configuration, started on first use, stopped at module end."""

    def __init__(self, tmp: pytest.TempPathFactory, stack: contextlib.ExitStack) -> None:
        self.tmp = tmp
        self.stack = stack
        self.running: dict[tuple[str, ...], TsPeer] = {}

    def __call__(self, mode: str, *extra: str) -> TsPeer:
        flags = (*FLAGS[mode], *extra)
        if flags not in self.running:
            self.running[flags] = self.stack.enter_context(
                ts_peer(self.tmp.mktemp("ts-peer"), *flags)
            )
        return self.running[flags]


@pytest.fixture(scope="module")
def peers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Peers]:
    with contextlib.ExitStack() as stack:
        yield Peers(tmp_path_factory, stack)


@pytest.fixture
def caller(tmp_path: Path) -> Caller:
    return Caller(f"sqlite:///{tmp_path / 'ledger.db'}")


@pytest.fixture
def tag(request: pytest.FixtureRequest) -> str:
    """A tag unique to this test case: the peer logs it with every execution."""
    return str(request.node.name)


def task_id(peer: TsPeer, tag: str) -> str:
    started = peer.wait_for(lambda e: e.get("event") == "started" and e.get("tag") == tag)
    return str(started["taskId"])


def result_text(view: dict[str, Any]) -> str:
    content = (view.get("result") or {}).get("content") or []
    return " ".join(str(block.get("text")) for block in content if isinstance(block, dict))


def explain(peer: TsPeer, view: dict[str, Any]) -> str:
    return f"receipt view: {json.dumps(view, sort_keys=True)[:1500]}\npeer:\n{peer.log()}"


# --- outcomes ---------------------------------------------------------------------------------


@pytest.mark.parametrize("mode", modes())
def test_call_creates_one_task_and_leaves_it_working(
    peers: Peers, caller: Caller, mode: str, tag: str
) -> None:
    """Negotiation picks 2025-11-25 tasks; `call` without --wait sends one task-augmented
    create (answered on an event stream) and returns while the task works."""
    peer = peers(mode)
    arguments = {"a": 1, "b": 2, "gate": tag, "tag": tag}
    try:
        code, view, _ = caller.call(peer.url, "slow_add", arguments, "n")
    finally:
        peer.open_gate(tag)  # the task works until the test has seen the receipt view
    assert (code, view["state"], view["protocol"]) == (0, "working", "2025-11-25"), explain(
        peer, view
    )
    assert view["operation_id"] == task_id(peer, tag)
    assert len(peer.executions(tag)) == 1


@pytest.mark.parametrize("mode", modes())
def test_slow_task_completes(peers: Peers, caller: Caller, mode: str, tag: str) -> None:
    peer = peers(mode)
    code, view, _ = caller.call(peer.url, "slow_add", {"a": 2, "b": 3, "tag": tag}, "n", "--wait")
    outcome = (view["state"], view["server_status"], view["result_kind"])
    assert outcome == ("accepted", "completed", "value"), explain(peer, view)
    assert code == 0
    assert view["result"]["structuredContent"] == {"sum": 5}
    assert view["operation_id"] == task_id(peer, tag)
    assert len(peer.executions(tag)) == 1


@pytest.mark.parametrize("mode", modes())
def test_tool_error_stays_a_tool_error(peers: Peers, caller: Caller, mode: str, tag: str) -> None:
    peer = peers(mode)
    code, view, _ = caller.call(peer.url, "tool_error", {"tag": tag}, "n", "--wait")
    assert (view["state"], view["result_kind"]) == ("accepted", "tool_error"), explain(peer, view)
    assert code == NOT_OK
    # 2025-11-25: a tool result with isError ends the task `failed`; it stays a tool error.
    assert view["server_status"] == "failed"
    assert view["result"]["isError"] is True
    assert result_text(view) == "bad input (tool-level)"
    assert len(peer.executions(tag)) == 1


@pytest.mark.parametrize("mode", modes())
def test_protocol_error_stays_a_protocol_error(
    peers: Peers, caller: Caller, mode: str, tag: str
) -> None:
    peer = peers(mode)
    code, view, _ = caller.call(peer.url, "protocol_error", {"tag": tag}, "n", "--wait")
    outcome = (view["state"], view["server_status"], view["result_kind"])
    assert outcome == ("accepted", "failed", "protocol_error"), explain(peer, view)
    assert code == NOT_OK
    # The task's own JSON-RPC error, as tasks/result answered it: not a transport's.
    assert view["result"]["code"] == -32603
    assert "upstream rate limit" in view["result"]["message"]
    assert view["result"]["data"] == {"retryAfter": 5}
    assert len(peer.executions(tag)) == 1


@pytest.mark.parametrize("mode", modes())
def test_plain_synchronous_tool(peers: Peers, caller: Caller, mode: str) -> None:
    """A tool without task support (taskSupport forbidden) is called synchronously."""
    peer = peers(mode)
    code, view, _ = caller.call(peer.url, "shout", {"text": "hi"}, "n", "--wait")
    assert (view["state"], view["result_kind"]) == ("accepted", "value"), explain(peer, view)
    assert code == 0
    assert result_text(view) == "HI"


# --- cancellation -----------------------------------------------------------------------------


@pytest.mark.parametrize("mode", modes())
def test_ops_cancel_from_a_second_process_during_call_wait(
    peers: Peers, caller: Caller, mode: str, tag: str
) -> None:
    peer = peers(mode)
    arguments = {"ms": UNTIL_CANCELLED_MS, "tag": tag}
    waiting = caller.start(*call_args(peer.url, "linger", arguments, "n", "--wait"))
    try:
        started = task_id(peer, tag)
        cancelled = caller.run("ops", "cancel", "n", "--json")
        assert cancelled.returncode == 0, cancelled.stderr
        assert json.loads(cancelled.stdout)["outcome"] == "requested"
        code, out, err = finish(waiting)
    finally:
        stop(waiting)
    view = view_of(out, err)
    assert view["state"] == "cancelled_accepted", explain(peer, view)
    assert code == NOT_OK
    assert peer.task_events(started) == ["started", "cancelled"]


@pytest.mark.parametrize("mode", modes())
def test_ops_cancel_then_a_worker_sends_it(
    peers: Peers, caller: Caller, mode: str, tag: str, tmp_path: Path
) -> None:
    """``call`` sends the create and exits; ``ops cancel`` records the request; a worker
    (another process: another HTTP client and, when stateful, another session) sends it."""
    peer = peers(mode)
    arguments = {"ms": UNTIL_CANCELLED_MS, "tag": tag}
    code, view, _ = caller.call(peer.url, "linger", arguments, "n")
    assert (code, view["state"]) == (0, "working"), explain(peer, view)
    started = task_id(peer, tag)
    cancelled = caller.run("ops", "cancel", "n", "--json")
    assert json.loads(cancelled.stdout)["outcome"] == "requested", cancelled.stderr
    view, worker_exit = run_worker_until_settled(caller, tmp_path / "ledger.db", "n")
    assert view["state"] == "cancelled_accepted", explain(peer, view)
    assert peer.task_events(started) == ["started", "cancelled"]
    assert worker_exit == 0


# --- never twice --------------------------------------------------------------------------------


@pytest.mark.parametrize("mode", modes())
def test_another_process_finishes_the_task_without_running_it_again(
    peers: Peers, caller: Caller, mode: str, tag: str
) -> None:
    """``call`` sends the create and exits; ``call --wait`` on the same node (another
    process: another HTTP client and, when stateful, another session) carries the task to
    its receipt."""
    peer = peers(mode)
    arguments = {"a": 1, "b": 1, "gate": tag, "tag": tag}
    try:
        code, view, _ = caller.call(peer.url, "slow_add", arguments, "n")
    finally:
        peer.open_gate(tag)  # the first process has left the task working
    assert (code, view["state"]) == (0, "working"), explain(peer, view)
    code, view, _ = caller.call(peer.url, "slow_add", arguments, "n", "--wait")
    assert (view["state"], view["result_kind"]) == ("accepted", "value"), explain(peer, view)
    assert view["result"]["structuredContent"] == {"sum": 2}
    assert len(peer.executions(tag)) == 1


@pytest.mark.parametrize("mode", modes())
def test_calling_the_same_node_again_attaches(
    peers: Peers, caller: Caller, mode: str, tag: str
) -> None:
    peer = peers(mode)
    arguments = {"a": 4, "b": 5, "tag": tag}
    _, first, _ = caller.call(peer.url, "slow_add", arguments, "n", "--wait")
    assert first["state"] == "accepted", explain(peer, first)
    code, second, _ = caller.call(peer.url, "slow_add", arguments, "n", "--wait")
    assert code == 0
    assert second["result_digest"] == first["result_digest"]
    assert len(peer.executions(tag)) == 1


# --- input ------------------------------------------------------------------------------------
# Stateful only: the SDK delivers an in-task elicitation on the tasks/result stream of the
# session holding the task, to a client whose initialize declared the capability. A
# stateless SDK server builds a fresh server per request that never saw an initialize, so
# it cannot elicit at all (elicitInput throws "Client does not support form elicitation."
# whatever the client declared): nothing there for a caller to answer.


@pytest.mark.anyio
async def test_elicitation_answered_by_an_input_policy(
    peers: Peers, tmp_path: Path, tag: str
) -> None:
    peer = peers(STATEFUL)

    def policy(_record: OperationRecord, ask: Any) -> dict[str, Any]:
        return {key: {"action": "accept", "content": {"name": "Luca"}} for key in ask.keys}

    with SQLiteLedger(tmp_path / "ledger.db") as ledger:
        executor = Executor(ledger, input_policy=policy, refresh_interval_s=0.2)
        try:
            binding = await executor.bind(peer.url, "ask_name")
            executor.call(CallSpec(call_node_id="n", binding=binding, arguments={"tag": tag}))
            record = await settle(executor, "n")
        finally:
            await executor.aclose()
        payload = ledger.result_payload("n")
    assert (record.state, record.result_kind) == (State.ACCEPTED, ResultKind.VALUE), peer.log()
    assert payload is not None
    assert json.loads(payload)["content"][0]["text"] == "Hello, Luca!"
    assert len(peer.executions(tag)) == 1


def test_elicitation_answered_with_ops_answer_during_call_wait(
    peers: Peers, caller: Caller, tag: str
) -> None:
    peer = peers(STATEFUL)
    waiting = caller.start(*call_args(peer.url, "ask_name", {"tag": tag}, "n", "--wait"))
    try:
        pending = pending_keys(caller, "n", waiting)
        assert pending, "the caller never recorded the peer's elicitation:\n" + peer.log()
        answer = json.dumps({"action": "accept", "content": {"name": "Ada"}})
        answered = caller.run("ops", "answer", "n", "--key", pending[0], "--answer-json", answer)
        assert answered.returncode == 0, answered.stderr
        code, out, err = finish(waiting)
    finally:
        stop(waiting)
    view = view_of(out, err)
    assert (view["state"], view["result_kind"]) == ("accepted", "value"), explain(peer, view)
    assert code == 0
    assert result_text(view) == "Hello, Ada!"
    assert len(peer.executions(tag)) == 1


# --- streams and sessions -----------------------------------------------------------------------


@pytest.mark.parametrize("mode", modes())
def test_resumable_streams_with_priming_events(
    peers: Peers, caller: Caller, mode: str, tag: str
) -> None:
    peer = peers(mode, "--event-store")
    code, view, _ = caller.call(peer.url, "slow_add", {"a": 1, "b": 2, "tag": tag}, "n", "--wait")
    assert (view["state"], view["result_kind"]) == ("accepted", "value"), explain(peer, view)
    assert code == 0
    assert view["result"]["structuredContent"] == {"sum": 3}
    assert len(peer.executions(tag)) == 1


def test_one_process_keeps_its_session(peers: Peers, caller: Caller) -> None:
    """Within one process every request after initialize carries the session it got."""
    peer = peers(STATEFUL)
    mark = peer.mark()
    code, view, _ = caller.call(peer.url, "shout", {"text": "one"}, "n", "--wait")
    assert code == 0, explain(peer, view)
    exchanges = peer.exchanges_since(mark)
    rpcs = [e["rpc"] for e in exchanges]
    assert "initialize" in rpcs, peer.log()
    after = exchanges[rpcs.index("initialize") + 1 :]
    posts = [e["rpc"] for e in after if e["verb"] == "POST"]
    assert posts[-1:] == ["tools/call"], peer.log()
    assert len({e["session"] for e in after}) == 1, peer.log()
    assert None not in {e["session"] for e in after}, peer.log()


def test_the_session_is_closed_with_delete(peers: Peers, caller: Caller) -> None:
    peer = peers(STATEFUL)
    mark = peer.mark()
    code, view, _ = caller.call(peer.url, "shout", {"text": "bye"}, "n", "--wait")
    assert code == 0, explain(peer, view)
    exchanges = peer.exchanges_since(mark)
    used = {e["session"] for e in exchanges if e["verb"] == "POST" and e["session"]}
    deleted = {e["session"] for e in exchanges if e["verb"] == "DELETE"}
    assert used, peer.log()
    assert used <= deleted, peer.log()


# --- helpers ----------------------------------------------------------------------------------


async def settle(executor: Executor, node: str) -> OperationRecord:
    """Run the executor until the node is terminal or needs reconciliation (bounded)."""
    stop_running = asyncio.Event()
    runner = asyncio.create_task(executor.run(stop=stop_running))
    try:
        async with asyncio.timeout(SETTLE_LIMIT_S):
            return await executor.wait_for(node, settled)
    finally:
        stop_running.set()
        await runner


def settled(record: OperationRecord) -> bool:
    return record.is_terminal or record.state is State.RECONCILIATION_REQUIRED


def run_worker_until_settled(
    caller: Caller, ledger_path: Path, node: str
) -> tuple[dict[str, Any], int | None]:
    """Run ``worker --until-idle`` until ``node`` is terminal or needs reconciliation (as
    the ledger file it writes says); its exit code, or None when it did not exit by itself
    within :data:`WORKER_EXIT_GRACE_S` after that."""
    worker = caller.start("worker", "--until-idle")
    try:
        deadline = time.monotonic() + SETTLE_LIMIT_S
        while time.monotonic() < deadline and worker.poll() is None:
            with SQLiteLedger(ledger_path) as ledger:
                if settled(ledger.get(node)):
                    break
            time.sleep(0.05)  # another process writes the ledger: poll the file, bounded
        try:
            exit_code: int | None = worker.wait(timeout=WORKER_EXIT_GRACE_S)
        except subprocess.TimeoutExpired:
            exit_code = None
    finally:
        stop(worker)
    return caller.show(node), exit_code


def pending_keys(caller: Caller, node: str, waiting: subprocess.Popen[str]) -> list[str]:
    """The input keys the caller recorded for ``node``; empty once ``waiting`` ended without
    any (bounded polling: another process writes the ledger)."""
    deadline = time.monotonic() + SETTLE_LIMIT_S
    while time.monotonic() < deadline and waiting.poll() is None:
        done = caller.run("ops", "show", node, "--json")
        if done.returncode == 0 and json.loads(done.stdout)["input_keys_pending"]:
            return list(json.loads(done.stdout)["input_keys_pending"])
        time.sleep(0.1)
    return []
