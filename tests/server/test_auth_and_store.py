"""Authentication to principals, the append-only status history, and store URLs."""

from __future__ import annotations

import itertools
from pathlib import Path

import httpx
import pytest

from conftest import ModernClient
from longcall.server import (
    ANONYMOUS,
    LongcallServer,
    SqliteTaskStore,
    StaticTokens,
    StoreError,
    TaskStatus,
    build_reference_server,
    open_store,
    running_server,
    token_principal,
)

pytestmark = pytest.mark.anyio


def test_token_principal_names_tokens_by_digest() -> None:
    """No header is anonymous; a bearer token is its own principal, named without the token."""
    assert token_principal({}) == ANONYMOUS
    alice = token_principal({"authorization": "Bearer secret-a"})
    assert alice is not None
    assert "secret-a" not in alice.subject
    assert token_principal({"authorization": "Bearer secret-a"}) == alice
    assert token_principal({"authorization": "Bearer secret-b"}) != alice
    assert token_principal({"authorization": "Basic abc"}) is None


async def test_static_tokens_reject_unknown_tokens(
    http: httpx.AsyncClient, store_path: str
) -> None:
    """With a token table, an unknown token gets HTTP 401 and a known one is its subject."""
    auth = StaticTokens({"t-alice": "alice"})
    server = build_reference_server(store=store_path, authenticator=auth)
    async with running_server(server) as url:
        rejected = await ModernClient(http, url, token="t-mallory").post("server/discover")
        assert rejected.status_code == 401
        anonymous = await ModernClient(http, url).post("server/discover")
        assert anonymous.status_code == 401
        alice = ModernClient(http, url, token="t-alice")
        task = await alice.create("crawl", {"pages": 0, "items_per_page": 0})
        record = await server.store.get(task["taskId"])
        assert record is not None
        assert record.principal == "alice"


ANSWERED_HISTORY = [
    TaskStatus.WORKING,
    TaskStatus.INPUT_REQUIRED,
    TaskStatus.WORKING,
    TaskStatus.COMPLETED,
]
"""The statuses of an ``approve`` task that asked once and was answered."""


async def asking_approval(client: ModernClient) -> tuple[str, str]:
    """An ``approve`` task once it waits for its answer: its id and the input key."""
    task = await client.create("approve", {"change": "x"})
    waiting = await client.wait_status(task["taskId"], {"input_required"})
    return task["taskId"], next(iter(waiting["inputRequests"]))


async def test_a_run_that_sees_its_answers_first_resumes_the_task_itself(
    http: httpx.AsyncClient, store_path: str
) -> None:
    """The run can see the last answer before the answering request moves the task back to
    ``working``; it then moves it itself, so the task never ends from ``input_required``.
    (The answer is stored here as that request stores it, without its status change.)"""
    server = build_reference_server(store=store_path)
    async with running_server(server) as url:
        client = ModernClient(http, url)
        task_id, key = await asking_approval(client)
        manager = server.manager
        answer = {key: {"action": "decline"}}
        await manager.store.answer_inputs(task_id, answer, now=manager.clock())
        manager.hub.publish(task_id)
        await client.wait_status(task_id, {"completed"})
        history = await server.store.history(task_id)
    assert [change.status for change in history] == ANSWERED_HISTORY


async def test_status_history_is_append_only(http: httpx.AsyncClient, store_path: str) -> None:
    """Every status change appends one history row, in order, ending in one terminal row."""
    server = build_reference_server(store=store_path)
    async with running_server(server) as url:
        client = ModernClient(http, url)
        task_id, key = await asking_approval(client)
        answer = {key: {"action": "decline"}}
        await client.result("tasks/update", {"taskId": task_id, "inputResponses": answer})
        done = await client.wait_status(task_id, {"completed"})
        assert done["result"]["structuredContent"] == {"change": "x", "approved": False}
        history = await server.store.history(task_id)
    assert [change.status for change in history] == ANSWERED_HISTORY
    assert [change.sequence for change in history] == [1, 2, 3, 4]
    assert all(a.at <= b.at for a, b in itertools.pairwise(history))


def test_store_urls(tmp_path: Path) -> None:
    """sqlite:////absolute and bare paths open SQLite files; other schemes are refused."""
    absolute = open_store(f"sqlite:///{tmp_path / 'a.db'}?synchronous=normal")
    assert isinstance(absolute, SqliteTaskStore)
    absolute.close()
    assert (tmp_path / "a.db").exists()
    bare = open_store(str(tmp_path / "b.db"))
    bare.close()
    assert (tmp_path / "b.db").exists()
    with pytest.raises(StoreError):
        open_store("postgresql://localhost/tasks")
    with pytest.raises(StoreError):
        SqliteTaskStore(tmp_path / "c.db", synchronous="OFF")


def test_tool_declarations_are_checked() -> None:
    """An unknown task mode or a non-positive interval is refused (a plain ``def`` is
    taken and run off the loop: tests/server/test_plain_def_tool.py)."""
    server = LongcallServer(store=":memory:")

    async def fine() -> None:
        return None

    with pytest.raises(ValueError, match="task must be"):
        server.tool(task="sometimes")(fine)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="positive"):
        server.tool(poll_interval_ms=0)(fine)
