"""A dead server process's running tasks are taken over at once, a live one's never (D1).

Each server process holds a ``flock`` on a file of its own (beside an SQLite store; in
a private directory of this host named by the store's id for PostgreSQL), which the
kernel drops when the process dies. The leases here are 300 s, longer than any wait of
the test, so a takeover can only come from that proof, and the history row says so. An
owner this kernel cannot judge (another host's, or a file of another boot) waits for
its lease.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import socket
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from test_multi_process import Serve

from conftest import ModernClient
from longcall.server.store import SqliteTaskStore, open_store
from longcall.server.store.base import DEAD_OWNER_NOTE
from longcall.server.store.owners import boot_id

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

LEASE_S = 300.0
STARTUP_LIMIT_S = 240.0
"""A generous bound for a server to start on a loaded machine (36 s at load 20), still
inside the lease: a takeover within it is the proof's, never the lease's."""
CHILD_LIMIT_S = 30.0

HOLDER = textwrap.dedent(
    """
    import asyncio, sys, time
    from longcall.server.model import NewTask, ProtocolVersion
    from longcall.server.store import SqliteTaskStore, open_store

    async def main(url, owner, count):
        store = open_store(url)
        await store.hold_owner(owner)
        for number in range(count):
            task = NewTask(
                task_id="t-held" if number == 0 else f"t-held-{number}", principal="p",
                tool_name="tool", arguments={}, arguments_digest="d",
                protocol=ProtocolVersion.MODERN, submission_key=None,
                created_at=time.time() + number, ttl_ms=3_600_000, poll_interval_ms=100,
            )
            await store.create(task, owner=owner, lease_until=time.time() + {lease})
        print("ready", flush=True)
        sys.stdin.readline()  # lives until the test kills it

    asyncio.run(main(sys.argv[1], sys.argv[2], int(sys.argv[3])))
    """
).replace("{lease}", str(LEASE_S))


def _owner_id(host: str | None = None) -> str:
    """An owner id of this host (or ``host``), as a server process names itself."""
    return f"{host or socket.gethostname()}/{os.getpid() + 100000}/feedc0de"


@contextlib.contextmanager
def _holding(
    store_url: str, tasks: int = 1, *, host: str | None = None
) -> Iterator[tuple[subprocess.Popen[str], str]]:
    """A child process that holds its owner's lock and ``tasks`` leased tasks, until killed."""
    owner = _owner_id(host)
    child = subprocess.Popen(
        [sys.executable, "-c", HOLDER, store_url, owner, str(tasks)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert child.stdout is not None
        # A blocking read of the child's first line: the event itself, not a poll.
        assert child.stdout.readline().strip() == "ready"
        yield child, owner
    finally:
        if child.poll() is None:
            child.kill()
        child.wait(timeout=CHILD_LIMIT_S)


@pytest.fixture
def holder(store_url: str) -> Iterator[tuple[subprocess.Popen[str], str]]:
    """A child process that holds its owner's lock and one leased task, until killed."""
    with _holding(store_url) as held:
        yield held


async def test_a_live_owner_keeps_its_tasks_and_a_dead_one_loses_them_at_once(
    store_url: str, holder: tuple[subprocess.Popen[str], str]
) -> None:
    """While the holder lives, no claim takes its leased task; once it is SIGKILLed, the
    next claim takes it, saying the owner's process is gone, long before its lease ends."""
    child, owner = holder
    store = open_store(store_url)
    try:
        now = time.time()
        assert await store.claim_expired("probe", clock=lambda: now, lease_s=LEASE_S) == []
        child.send_signal(signal.SIGKILL)
        child.wait(timeout=CHILD_LIMIT_S)
        now = time.time()
        (claimed,) = await store.claim_expired("probe", clock=lambda: now, lease_s=LEASE_S)
        assert claimed.task_id == "t-held"
        assert claimed.execution_epoch == 2
        history = await store.history("t-held")
        assert history[-1].reason == f"claimed by probe from {owner}{DEAD_OWNER_NOTE}"
    finally:
        store.close()


async def test_an_owner_of_another_host_waits_for_its_lease(store_url: str) -> None:
    """An owner whose id names another host is never judged by a lock of this kernel:
    killed, its task is taken only once its lease has run out."""
    store = open_store(store_url)
    try:
        with _holding(store_url, host="elsewhere") as (child, owner):
            child.send_signal(signal.SIGKILL)
            child.wait(timeout=CHILD_LIMIT_S)
            now = time.time()
            assert await store.claim_expired("probe", clock=lambda: now, lease_s=LEASE_S) == []
            later = now + LEASE_S + 1
            (claimed,) = await store.claim_expired("probe", clock=lambda: later, lease_s=LEASE_S)
            history = await store.history(claimed.task_id)
            assert history[-1].reason == f"claimed by probe from {owner}"
    finally:
        store.close()


async def test_a_lock_file_of_another_boot_proves_nothing(store_url: str) -> None:
    """A free lock file written under another boot id (another kernel sharing the
    directory) proves nothing: the task waits for its lease."""
    store = open_store(store_url)
    try:
        with _holding(store_url) as (child, owner):
            child.send_signal(signal.SIGKILL)
            child.wait(timeout=CHILD_LIMIT_S)
            locks = store.owner_locks
            assert locks is not None
            locks.path_of(owner).write_text(f"{owner}\nanother-boot\n")
            now = time.time()
            assert await store.claim_expired("probe", clock=lambda: now, lease_s=LEASE_S) == []
    finally:
        store.close()


async def test_a_dead_owner_with_more_tasks_than_a_batch_loses_them_all_at_once(
    tmp_path: Path,
) -> None:
    """SQLite: a claim takes one batch of a dead owner's tasks and keeps its lock file,
    so the next round proves it dead again and takes the rest before any lease ends;
    the file goes once the owner holds nothing."""
    url = f"sqlite:///{tmp_path / 's.db'}"
    store = SqliteTaskStore(tmp_path / "s.db")
    try:
        with _holding(url, tasks=5) as (child, owner):
            child.send_signal(signal.SIGKILL)
            child.wait(timeout=CHILD_LIMIT_S)
            taken: list[str] = []
            for expected in (2, 2, 1):
                batch = await store.claim_expired(
                    "probe", clock=time.time, lease_s=LEASE_S, limit=2
                )
                assert len(batch) == expected
                taken += [record.task_id for record in batch]
                assert store.owner_locks is not None
                assert store.owner_locks.path_of(owner).exists() == (expected == 2)
            assert sorted(taken) == ["t-held", *(f"t-held-{n}" for n in range(1, 5))]
            for task_id in taken:
                history = await store.history(task_id)
                assert history[-1].reason == f"claimed by probe from {owner}{DEAD_OWNER_NOTE}"
    finally:
        store.close()


async def _takeovers_of(store_url: str, task_id: str) -> list[tuple[float, str]]:
    """(when, why) of each takeover row in ``task_id``'s history."""
    store = open_store(store_url)
    try:
        history = await store.history(task_id)
    finally:
        store.close()
    return [
        (change.at, change.reason)
        for change in history
        if change.reason and change.reason.startswith("claimed by")
    ]


async def test_a_restarted_server_takes_a_killed_ones_tasks_over_at_once(
    store_url: str, tmp_path: Path, http: httpx.AsyncClient
) -> None:
    """SIGKILL a real ``longcall serve`` holding a running task, start another on the
    same store: before it answers its first request it has claimed the task because
    the dead process's lock was free (the lease, 300 s, is far from over), and it runs
    the task again (the tool is idempotent)."""
    first = Serve(store_url, tmp_path / "first.log", lease_s=LEASE_S)
    second: Serve | None = None
    try:
        await first.wait_ready(http, limit_s=STARTUP_LIMIT_S)
        task = await ModernClient(http, first.url).create(
            "sleep_report", {"seconds": 600, "rows": 1}
        )
        first.kill()
        restarted_at = time.time()
        second = Serve(store_url, tmp_path / "second.log", lease_s=LEASE_S)
        await second.wait_ready(http, limit_s=STARTUP_LIMIT_S)
        ready_at = time.time()
        ((claimed_at, reason),) = await _takeovers_of(store_url, task["taskId"])
        assert reason.endswith(DEAD_OWNER_NOTE), reason
        assert restarted_at < claimed_at <= ready_at
        print(
            f"taken over {claimed_at - restarted_at:.2f} s after the restart,"
            f" {ready_at - claimed_at:.2f} s before the server answered (lease {LEASE_S:g} s)"
        )
        running = await ModernClient(http, second.url).get(task["taskId"])
        assert running["status"] == "working"
    finally:
        first.stop()
        if second is not None:
            second.stop()


async def test_two_live_servers_never_take_each_others_tasks(
    store_url: str, tmp_path: Path, http: httpx.AsyncClient
) -> None:
    """A second ``longcall serve`` started on the store of a live one takes none of its
    running tasks (its start-up claim found the first one's lock held), and neither does
    a third claimer; the first one's task keeps its one execution."""
    first = Serve(store_url, tmp_path / "first.log", lease_s=LEASE_S)
    second: Serve | None = None
    try:
        await first.wait_ready(http, limit_s=STARTUP_LIMIT_S)
        task = await ModernClient(http, first.url).create(
            "sleep_report", {"seconds": 600, "rows": 1}
        )
        second = Serve(store_url, tmp_path / "second.log", lease_s=LEASE_S)
        # Its start-up claim ran before it served.
        await second.wait_ready(http, limit_s=STARTUP_LIMIT_S)
        store = open_store(store_url)
        try:
            now = time.time()
            assert await store.claim_expired("probe", clock=lambda: now, lease_s=LEASE_S) == []
            history = await store.history(task["taskId"])
        finally:
            store.close()
        assert [change.reason for change in history if "claimed" in (change.reason or "")] == []
        assert (await ModernClient(http, second.url).get(task["taskId"]))["status"] == "working"
    finally:
        first.stop()
        if second is not None:
            second.stop()


def test_a_lock_file_is_never_seen_free_while_its_process_lives(tmp_path: Path) -> None:
    """SQLite: the lock file is locked before it gets its name, and a clean close removes
    it; a stale one of a dead process without tasks is swept at the next start."""
    store = SqliteTaskStore(tmp_path / "s.db")
    owner = _owner_id()
    asyncio.run(store.hold_owner(owner))
    locks = store.owner_locks
    assert locks is not None
    path = locks.path_of(owner)
    assert path.read_text() == f"{owner}\n{boot_id()}\n"
    assert [p.name for p in locks.directory.iterdir()] == [path.name]
    store.close()
    assert not path.exists()
    stale = tmp_path / "s.db-owners" / "0123.lock"
    stale.parent.mkdir(exist_ok=True)  # the last process's close removed it, empty
    stale.write_text(f"gone/1/x\n{boot_id()}\n")
    again = SqliteTaskStore(tmp_path / "s.db")
    try:
        asyncio.run(again.hold_owner(_owner_id() + "2"))
        assert not stale.exists()
    finally:
        again.close()
