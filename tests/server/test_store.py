"""The task-store contract on SQLite and PostgreSQL: identity, versions, leases, fencing, quota."""

from __future__ import annotations

import asyncio
import sqlite3
import threading
import time
from pathlib import Path

import pytest

from longcall.server.errors import QuotaExceeded, StoreError
from longcall.server.model import NewTask, ProtocolVersion, TaskStatus
from longcall.server.states import TRANSITIONS, Cause, sources, target
from longcall.server.store import RERUN_MESSAGE, SqliteTaskStore, open_store
from longcall.server.store.sqlite import MIGRATIONS

pytestmark = pytest.mark.anyio

LEASE_S = 10.0


def new_task(task_id: str, principal: str = "p", created_at: float | None = None) -> NewTask:
    """A minimal task to store."""
    return NewTask(
        task_id=task_id,
        principal=principal,
        tool_name="tool",
        arguments={"n": 1},
        arguments_digest="d",
        protocol=ProtocolVersion.MODERN,
        submission_key=None,
        created_at=time.time() if created_at is None else created_at,
        ttl_ms=3_600_000,
        poll_interval_ms=100,
    )


def test_the_status_table_has_absorbing_terminals() -> None:
    """No row leaves a terminal status; each cause has one target and at least one source."""
    assert not any(status.is_terminal for status, _ in TRANSITIONS)
    for cause in Cause:
        assert sources(cause)
        assert target(cause) in TaskStatus


async def test_identity_is_made_once_and_kept(store_url: str) -> None:
    """A store's id survives reopening; another store has another id (C5)."""
    first = open_store(store_url)
    identity = first.store_id
    first.close()
    again = open_store(store_url)
    assert again.store_id == identity
    again.close()
    assert len(identity) == 32


async def test_status_changes_follow_the_table(store_url: str) -> None:
    """A cause not allowed from the current status changes nothing; terminals are absorbing."""
    store = open_store(store_url)
    try:
        now = time.time()
        await store.create(new_task("t1"), owner="a", lease_until=now + LEASE_S)
        assert await store.transition("t1", Cause.INPUT_ANSWERED, now=now) is None
        parked = await store.transition("t1", Cause.INPUT_REQUESTED, now=now)
        assert parked is not None
        assert parked.status is TaskStatus.INPUT_REQUIRED
        done = await store.transition("t1", Cause.TOOL_RETURNED, now=now, result={"ok": 1})
        assert done is not None
        assert done.status is TaskStatus.COMPLETED
        assert done.owner is None  # a terminal task holds no lease
        for cause in Cause:
            assert await store.transition("t1", cause, now=now) is None
        history = await store.history("t1")
        assert [change.reason for change in history] == [
            "created by a",
            "input requested",
            "tool returned",
        ]
    finally:
        store.close()


async def test_a_live_lease_is_never_claimed(store_url: str) -> None:
    """Another owner cannot take a task over while its lease runs; nobody claims its own."""
    store = open_store(store_url)
    try:
        now = time.time()
        await store.create(new_task("t1"), owner="a", lease_until=now + LEASE_S)
        assert await store.claim_expired("b", clock=lambda: now, lease_s=LEASE_S) == []
        later = now + 2 * LEASE_S
        assert await store.claim_expired("a", clock=lambda: later, lease_s=LEASE_S) == []
        assert await store.renew_leases("a", until=now + 2 * LEASE_S) == {"t1": 1}
        sooner = now + 1.5 * LEASE_S
        assert await store.claim_expired("b", clock=lambda: sooner, lease_s=LEASE_S) == []
    finally:
        store.close()


async def test_a_claim_fences_the_old_owner_off(store_url: str) -> None:
    """After a takeover the old run's writes match no row (epoch fencing, D1)."""
    store = open_store(store_url)
    try:
        now = time.time()
        await store.create(new_task("t1"), owner="a", lease_until=now + LEASE_S)
        assert await store.set_status_message("t1", "step 3/9", now=now, epoch=1)
        later = now + 2 * LEASE_S
        (claimed,) = await store.claim_expired("b", clock=lambda: later, lease_s=LEASE_S)
        assert claimed.owner == "b"
        assert claimed.execution_epoch == 2
        assert claimed.status_message == RERUN_MESSAGE  # the old run's progress is stale
        assert await store.renew_leases("a", until=later + LEASE_S) == {}
        stale = await store.transition(
            "t1", Cause.TOOL_RETURNED, now=later, result={"late": True}, epoch=1
        )
        assert stale is None
        assert not await store.set_status_message("t1", "step 4/9", now=later, epoch=1)
        params = {"message": "ok?"}
        assert (
            await store.open_input_request(
                "t1", sequence=1, key="k", method="m", params=params, now=later, epoch=1
            )
            is None
        )
        won = await store.transition("t1", Cause.TOOL_RETURNED, now=later, result={}, epoch=2)
        assert won is not None
        history = await store.history("t1")
        assert history[1].reason == "claimed by b from a"
        assert sum(change.status.is_terminal for change in history) == 1
    finally:
        store.close()


async def test_released_leases_are_claimed_at_once(store_url: str) -> None:
    """A graceful stop hands the leases back: another owner need not wait for expiry."""
    store = open_store(store_url)
    try:
        now = time.time()
        await store.create(new_task("t1"), owner="a", lease_until=now + LEASE_S)
        assert await store.release("a") == 1
        (claimed,) = await store.claim_expired("b", clock=lambda: now, lease_s=LEASE_S)
        assert claimed.task_id == "t1"
    finally:
        store.close()


def test_two_claimers_never_take_one_task_twice(store_url: str) -> None:
    """Two stores (connections) claiming the same expired tasks at once split them."""
    first, second = open_store(store_url), open_store(store_url)
    try:
        now = time.time()
        for index in range(40):
            asyncio.run(first.create(new_task(f"t{index}"), owner="dead", lease_until=now - 1))
        claims: dict[str, list[str]] = {"b": [], "c": []}
        barrier = threading.Barrier(2)

        def claim(store: object, owner: str) -> None:
            barrier.wait()
            while True:
                got = asyncio.run(
                    store.claim_expired(owner, clock=lambda: now, lease_s=LEASE_S, limit=3)  # type: ignore[attr-defined]
                )
                if not got:
                    return
                claims[owner].extend(record.task_id for record in got)

        threads = [
            threading.Thread(target=claim, args=(first, "b")),
            threading.Thread(target=claim, args=(second, "c")),
        ]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=30)
        everything = claims["b"] + claims["c"]
        assert sorted(everything) == sorted(f"t{index}" for index in range(40))
    finally:
        first.close()
        second.close()


async def test_open_task_quota_per_principal(store_url: str) -> None:
    """A principal may hold at most ``max_open`` open tasks; others are not affected."""
    store = open_store(store_url)
    try:
        now = time.time()
        for index in range(2):
            await store.create(new_task(f"a{index}"), owner="o", lease_until=now, max_open=2)
        with pytest.raises(QuotaExceeded):
            await store.create(new_task("a2"), owner="o", lease_until=now, max_open=2)
        await store.create(new_task("b0", principal="q"), owner="o", lease_until=now, max_open=2)
        await store.transition("a0", Cause.CANCEL_REQUESTED, now=now)
        await store.create(new_task("a2"), owner="o", lease_until=now, max_open=2)
        assert await store.get("a2") is not None
    finally:
        store.close()


# ---- SQLite files: versions, foreign files, vanished files --------------------------------


def test_a_store_from_before_versions_is_adopted_and_migrated(tmp_path: Path) -> None:
    """A file with the original unversioned schema opens as version 1, then migrates."""
    path = tmp_path / "old.db"
    with sqlite3.connect(path) as db:
        db.executescript(MIGRATIONS[0])
        db.execute(
            "INSERT INTO tasks (task_id, principal, tool_name, arguments, arguments_digest,"
            " protocol, status, created_at, last_updated_at, poll_interval_ms)"
            " VALUES ('old', 'p', 'tool', '{}', 'd', '2026-07-28', 'working', 1, 1, 100)"
        )
    store = SqliteTaskStore(path)
    try:
        record = asyncio.run(store.get("old"))
        assert record is not None
        assert record.owner is None  # claimable at once: nobody holds it
        with sqlite3.connect(path) as db:
            assert db.execute("SELECT max(version) FROM schema_version").fetchone() == (
                len(MIGRATIONS),
            )
    finally:
        store.close()


def test_foreign_empty_and_newer_files_are_refused(tmp_path: Path) -> None:
    """Not a task store, an empty file, or a newer schema: a clear error, nothing changed."""
    foreign = tmp_path / "foreign.db"
    with sqlite3.connect(foreign) as db:
        db.execute("CREATE TABLE invoices (id INTEGER)")
    with pytest.raises(StoreError, match="not a longcall task store"):
        SqliteTaskStore(foreign)
    empty = tmp_path / "empty.db"
    empty.write_bytes(b"")
    with pytest.raises(StoreError, match="empty file"):
        SqliteTaskStore(empty)
    assert empty.read_bytes() == b""
    newer = tmp_path / "newer.db"
    SqliteTaskStore(newer).close()
    with sqlite3.connect(newer) as db:
        db.execute("INSERT INTO schema_version (version) VALUES (99)")
    with pytest.raises(StoreError, match="newer"):
        SqliteTaskStore(newer)
    garbage = tmp_path / "garbage.db"
    garbage.write_bytes(b"this is not a database at all" * 100)
    with pytest.raises(StoreError):
        SqliteTaskStore(garbage)


def test_foreign_postgres_schema_is_refused(pg_store_url: str) -> None:
    """A PostgreSQL schema holding other tables is not taken over."""
    import psycopg

    dsn, _, schema = pg_store_url.partition("?schema=")
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(f'CREATE SCHEMA "{schema}"')
        conn.execute(f'CREATE TABLE "{schema}".invoices (id INTEGER)')
    with pytest.raises(StoreError, match="no longcall task store"):
        open_store(pg_store_url)
