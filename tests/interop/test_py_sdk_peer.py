"""The caller against the most deployed Python MCP servers: the official Python SDK 1.x
(``mcp`` 1.30) and fastmcp 4.2, each a real package in its own venv (``make interop``),
on 127.0.0.1, stateful (sessions) and stateless.

* ``interop/py-mcp1/peer.py --kind tasks``: the SDK's low-level ``Server`` with
  ``experimental.enable_tasks()`` (2025-11-25 experimental tasks) behind
  ``StreamableHTTPSessionManager`` in a Starlette ``Mount("/mcp")``, as the SDK's own
  task example serves it;
* ``--kind fastmcp``: the SDK's ``FastMCP`` with plain tools on ``streamable_http_app()``;
* ``interop/py-fastmcp4/peer.py``: fastmcp 4.2 with plain tools (its task package,
  ``fastmcp-tasks``, exists only for 4.1: tests/adapters/test_fastmcp_peer.py).

Regressions: against a stateful SDK 1.x server ``longcall call`` exited 5 ("did not
answer server/discover nor initialize usably"): the 400 "Missing session ID" to the
``server/discover`` probe carries a fresh ``Mcp-Session-Id``, which was adopted, so
``initialize`` went out with a session nobody opened and got 404. ``POST /mcp`` to a
``Mount("/mcp")`` is answered with 307 to ``/mcp/``, which was not followed.

The caller is the real ``longcall`` command in separate processes on a temporary
``LONGCALL_LEDGER``. The peer prints one event per execution, so "never runs a node
twice" is counted where the work runs; its trace of every HTTP exchange is in each
failure message.
"""

from __future__ import annotations

import contextlib
import json
import signal
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from tests.bounds import LOADED_MACHINE_S

from .harness import Caller, TsPeer, call_args, finish, py_peer, stop, view_of
from .test_ts_sdk_peer import (
    NOT_OK,
    WORKER_EXIT_GRACE_S,
    explain,
    result_text,
    run_worker_until_settled,
    task_id,
)

pytestmark = pytest.mark.slow

MCP1 = "py-mcp1"
FASTMCP4 = "py-fastmcp4"
STATEFUL = "stateful"
STATELESS = "stateless"
FLAGS = {STATEFUL: (), STATELESS: ("--stateless",)}
KILL_LIMIT_S = LOADED_MACHINE_S
"""Bound on a worker's first poll: a worker process starts slowly on a loaded machine."""
WORKER_LEASE_S = "1"
"""A killed worker's operations are taken over after 1 s, not the default 30 s."""


def modes() -> list[Any]:
    return [pytest.param(mode, id=mode) for mode in (STATEFUL, STATELESS)]


class Peers:
    """One peer per (package, flags), started on first use, stopped at module end."""

    def __init__(self, tmp: pytest.TempPathFactory, stack: contextlib.ExitStack) -> None:
        self.tmp = tmp
        self.stack = stack
        self.running: dict[tuple[str, ...], TsPeer] = {}

    def __call__(self, name: str, mode: str, *extra: str) -> TsPeer:
        flags = (*FLAGS[mode], *extra)
        if (name, *flags) not in self.running:
            scratch = self.tmp.mktemp(name)
            self.running[(name, *flags)] = self.stack.enter_context(py_peer(scratch, name, *flags))
        return self.running[(name, *flags)]

    def tasks(self, mode: str) -> TsPeer:
        """The SDK 1.x low-level task server."""
        return self(MCP1, mode, "--kind", "tasks")


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


def executions(peer: TsPeer, tag: str) -> list[dict[str, Any]]:
    return peer.executions(tag)


# --- the SDK 1.x task server: outcomes ---------------------------------------------------


@pytest.mark.parametrize("mode", modes())
def test_sdk1_task_completes(peers: Peers, caller: Caller, mode: str, tag: str) -> None:
    """Negotiation picks 2025-11-25 tasks; ``call --wait`` carries one task to its result."""
    peer = peers.tasks(mode)
    code, view, _ = caller.call(peer.url, "slow_add", {"a": 2, "b": 3, "tag": tag}, "n", "--wait")
    outcome = (view["state"], view["server_status"], view["result_kind"], view["protocol"])
    assert outcome == ("accepted", "completed", "value", "2025-11-25"), explain(peer, view)
    assert code == 0
    assert view["result"]["structuredContent"] == {"sum": 5}
    assert view["operation_id"] == task_id(peer, tag)
    assert len(executions(peer, tag)) == 1


@pytest.mark.parametrize("mode", modes())
def test_sdk1_tool_error_stays_a_tool_error(
    peers: Peers, caller: Caller, mode: str, tag: str
) -> None:
    """A task whose result has isError is an accepted tool error, not a failure of ours."""
    peer = peers.tasks(mode)
    code, view, _ = caller.call(peer.url, "tool_error", {"tag": tag}, "n", "--wait")
    assert (view["state"], view["result_kind"]) == ("accepted", "tool_error"), explain(peer, view)
    assert code == NOT_OK
    assert view["result"]["isError"] is True
    assert result_text(view) == "bad input (tool-level)"
    assert len(executions(peer, tag)) == 1


@pytest.mark.parametrize("mode", modes())
def test_sdk1_plain_tool(peers: Peers, caller: Caller, mode: str, tag: str) -> None:
    """A tool without task support on the task server is called synchronously."""
    peer = peers.tasks(mode)
    code, view, _ = caller.call(peer.url, "shout", {"text": "hi", "tag": tag}, "n", "--wait")
    assert (view["state"], view["result_kind"]) == ("accepted", "value"), explain(peer, view)
    assert code == 0
    assert result_text(view) == "HI"
    assert len(executions(peer, tag)) == 1


@pytest.mark.parametrize("mode", modes())
def test_sdk1_ops_cancel_during_call_wait(
    peers: Peers, caller: Caller, mode: str, tag: str
) -> None:
    """``ops cancel`` from a second process: tasks/cancel is sent, the task stops, and the
    call ends cancelled."""
    peer = peers.tasks(mode)
    waiting = caller.start(*call_args(peer.url, "linger", {"ms": 30000, "tag": tag}, "n", "--wait"))
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
    assert [e["event"] for e in peer.events if e.get("taskId") == started] == [
        "started",
        "cancelled",
    ]


@pytest.mark.parametrize("mode", modes())
def test_sdk1_worker_killed_mid_task_resumes_without_a_second_run(
    peers: Peers, caller: Caller, mode: str, tag: str, tmp_path: Path
) -> None:
    """``call`` creates the task; a worker polls it and is SIGKILLed; the next worker
    (another process, and when stateful the kept session) carries the same task to its
    receipt: the tool ran once."""
    peer = peers.tasks(mode)
    release = tmp_path / "release"
    arguments = {"release": str(release), "tag": tag}
    code, view, _ = caller.call(peer.url, "held", arguments, "n")
    assert (code, view["state"]) == (0, "working"), explain(peer, view)
    started = task_id(peer, tag)
    mark = peer.mark()
    worker = caller.start("worker", "--lease", WORKER_LEASE_S)
    try:
        peer.wait_for(lambda e: e.get("rpc") == "tasks/get", KILL_LIMIT_S, since=mark)
        worker.send_signal(signal.SIGKILL)
        assert worker.wait(timeout=WORKER_EXIT_GRACE_S) == -signal.SIGKILL
    finally:
        stop(worker)
    release.touch()  # only now may the task end: the next worker must resume it
    view, worker_exit = run_worker_until_settled(caller, tmp_path / "ledger.db", "n")
    outcome = (view["state"], view["result_kind"])
    assert outcome == ("accepted", "value"), explain(peer, view)
    assert view["result"]["structuredContent"] == {"released": True}
    assert view["operation_id"] == started
    assert len(executions(peer, tag)) == 1
    assert worker_exit == 0


# --- the SDK 1.x task server: sessions and the Mount redirect ------------------------------


def test_sdk1_session_is_the_one_initialize_issued(peers: Peers, caller: Caller) -> None:
    """The probe's 400 carries a fresh session id; it is not used. ``initialize`` goes out
    without a session, and every later request carries the one its answer issued."""
    peer = peers.tasks(STATEFUL)
    mark = peer.mark()
    code, view, _ = caller.call(peer.url, "shout", {"text": "one"}, "n", "--wait")
    assert code == 0, explain(peer, view)
    exchanges = peer.exchanges_since(mark)
    probe = next(e for e in exchanges if e["rpc"] == "server/discover")
    assert (probe["status"], probe["session"]) == (400, None), peer.log()
    opening = next(e for e in exchanges if e["rpc"] == "initialize")
    assert (opening["status"], opening["session"]) == (200, None), peer.log()
    after = exchanges[exchanges.index(opening) + 1 :]
    assert {e["session"] for e in after} == {opening["issued"]}, peer.log()
    assert probe["issued"] != opening["issued"]
    assert [e["rpc"] for e in exchanges].count("initialize") == 1


def test_sdk1_session_the_server_ended_is_reopened(peers: Peers, caller: Caller) -> None:
    """The session this caller kept is ended at the server (DELETE); the next process
    resumes it, gets 404, opens a new session once and sends the refused request again."""
    peer = peers.tasks(STATEFUL)
    code, view, _ = caller.call(peer.url, "linger", {"ms": 30000}, "kept")
    assert (code, view["state"]) == (0, "working"), explain(peer, view)
    opened = [e for e in peer.events if e.get("rpc") == "initialize" and e.get("issued")]
    kept = str(opened[-1]["issued"])
    ended = httpx.delete(peer.url, headers={"mcp-session-id": kept}, timeout=10.0)
    assert ended.status_code == 200, ended.text
    # The peer reports each exchange on its own stream, after it answered: the mark is
    # taken once the DELETE is in the log, or the DELETE may land after it.
    peer.wait_for(lambda e: e.get("verb") == "DELETE" and e.get("session") == kept)
    mark = peer.mark()
    code, view, _ = caller.call(peer.url, "shout", {"text": "again"}, "m", "--wait")
    assert (code, view["state"], result_text(view)) == (0, "accepted", "AGAIN"), explain(peer, view)
    exchanges = peer.exchanges_since(mark)
    refused = [e for e in exchanges if e["session"] == kept]
    assert [e["status"] for e in refused] == [404], peer.log()
    assert [e["rpc"] for e in exchanges].count("initialize") == 1, peer.log()


def test_sdk1_behind_its_mount_redirect(peers: Peers, caller: Caller, tag: str) -> None:
    """The URL a user copies from the SDK's example (``/mcp``, no slash): every request
    is answered 307 to ``/mcp/`` by Starlette's Mount and followed there."""
    peer = peers.tasks(STATEFUL)
    url = peer.url.rstrip("/")
    mark = peer.mark()
    code, view, _ = caller.call(url, "slow_add", {"a": 1, "b": 1, "tag": tag}, "n", "--wait")
    assert (view["state"], view["result_kind"]) == ("accepted", "value"), explain(peer, view)
    assert code == 0
    exchanges = peer.exchanges_since(mark)
    redirected = [e for e in exchanges if e["path"] == "/mcp"]
    assert redirected, peer.log()
    assert {e["status"] for e in redirected} == {307}, peer.log()
    assert {e["location"] for e in redirected} == {peer.url}, peer.log()
    assert len(executions(peer, tag)) == 1


# --- plain tools: the SDK 1.x FastMCP and fastmcp 4.2 --------------------------------------


@pytest.mark.parametrize("mode", modes())
@pytest.mark.parametrize("package", [MCP1, FASTMCP4])
def test_fastmcp_plain_tools(
    peers: Peers, caller: Caller, package: str, mode: str, tag: str
) -> None:
    """A plain tool answers with its value; a ToolError is an accepted tool error."""
    peer = peers(package, mode, *(("--kind", "fastmcp") if package == MCP1 else ()))
    code, view, _ = caller.call(peer.url, "shout", {"text": "hi", "tag": tag}, "a", "--wait")
    assert (view["state"], view["result_kind"]) == ("accepted", "value"), explain(peer, view)
    assert (code, result_text(view)) == (0, "HI")
    code, view, _ = caller.call(peer.url, "tool_error", {"tag": tag}, "b", "--wait")
    assert (view["state"], view["result_kind"]) == ("accepted", "tool_error"), explain(peer, view)
    assert code == NOT_OK
    assert "bad input (tool-level)" in result_text(view)
    assert len(executions(peer, tag)) == 2


def test_fastmcp4_over_2025_11_25(peers: Peers, caller: Caller, tag: str) -> None:
    """fastmcp 4.2 answers 2026-07-28 by default; asked for 2025-11-25 (a session, when
    stateful) its plain tools work too."""
    peer = peers(FASTMCP4, STATEFUL)
    args = ("--protocol", "2025-11-25", "--wait")
    code, view, _ = caller.call(peer.url, "shout", {"text": "hi", "tag": tag}, "a", *args)
    assert (view["state"], view["result_kind"]) == ("accepted", "value"), explain(peer, view)
    assert view["protocol"].startswith("2025-11-25")
    assert (code, result_text(view)) == (0, "HI")
