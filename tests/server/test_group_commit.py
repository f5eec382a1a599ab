"""Group commit on the SQLite store: writes that queue up together share one commit, each
stays atomic on its own, and none is answered before its commit (real files, a real crash).
"""

from __future__ import annotations

import asyncio
import dataclasses
import sqlite3
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
from crash_before_commit import CRASHED, WriterGate, new_task
from tests.bounds import LOADED_MACHINE_S

from longcall.server.errors import StoreUnavailable, SubmissionKeyConflict
from longcall.server.model import NewTask
from longcall.server.states import Cause
from longcall.server.store import SqliteTaskStore

pytestmark = pytest.mark.anyio

QUEUED = 20
CHILD = Path(__file__).with_name("crash_before_commit.py")


def keyed(task_id: str, key: str, arguments: dict[str, Any]) -> NewTask:
    """A task created under a submission key."""
    return dataclasses.replace(
        new_task(task_id),
        submission_key=key,
        arguments=arguments,
        arguments_digest=repr(sorted(arguments.items())),
    )


def stored_ids(path: Path) -> set[str]:
    """The task ids committed to the file, read by a connection of the test's own."""
    with sqlite3.connect(path) as conn:
        return {str(row[0]) for row in conn.execute("SELECT task_id FROM tasks")}


async def held_then_together(
    store: SqliteTaskStore, writes: list[Callable[[], Awaitable[Any]]]
) -> tuple[WriterGate, list[Any]]:
    """Hold the writer inside one write's transaction while ``writes`` queue behind it,
    then let it go: the queued writes are one batch. Their outcomes (or errors), in order."""
    gate = WriterGate()
    store.run_sync(lambda conn: conn.set_trace_callback(gate))
    gate.armed = True
    held = asyncio.ensure_future(store.create(new_task("held"), owner="o", lease_until=1e12))
    await asyncio.to_thread(gate.entered.wait, LOADED_MACHINE_S)
    queued = [asyncio.ensure_future(write()) for write in writes]
    await asyncio.sleep(0)  # one turn: every queued write has handed its work over
    gate.opened.set()
    await held
    return gate, list(await asyncio.gather(*queued, return_exceptions=True))


async def test_writes_queued_together_share_one_commit(tmp_path: Path) -> None:
    """Twenty creates queued behind one commit are made durable by the next one, together."""
    path = tmp_path / "tasks.db"
    store = SqliteTaskStore(path)
    try:
        gate, outcomes = await held_then_together(
            store,
            [
                lambda n=n: store.create(new_task(f"t{n}"), owner="o", lease_until=1e12)
                for n in range(QUEUED)
            ],
        )
    finally:
        store.close()
    assert all(created for _, created in outcomes)
    assert gate.commits == 2  # "held", then the twenty at once
    assert stored_ids(path) == {"held", *(f"t{n}" for n in range(QUEUED))}


async def test_a_failed_write_undoes_only_itself(tmp_path: Path) -> None:
    """In one batch: a key reused for other arguments is refused, a key reused for the
    same call returns its task, a compare-and-set that does not apply changes nothing,
    and the other writes commit."""
    path = tmp_path / "tasks.db"
    store = SqliteTaskStore(path)
    try:
        first, _ = await store.create(keyed("first", "k", {"n": 1}), owner="o", lease_until=1e12)
        gate, outcomes = await held_then_together(
            store,
            [
                lambda: store.create(keyed("again", "k", {"n": 1}), owner="o", lease_until=1e12),
                lambda: store.create(keyed("other", "k", {"n": 2}), owner="o", lease_until=1e12),
                lambda: store.create(new_task("fresh"), owner="o", lease_until=1e12),
                lambda: store.transition("first", Cause.TOOL_RETURNED, now=time.time()),
                lambda: store.transition("first", Cause.INPUT_ANSWERED, now=time.time()),
            ],
        )
        history = await store.history("first")
    finally:
        store.close()
    again, conflict, fresh, completed, not_applied = outcomes
    assert again == (first, False)
    assert isinstance(conflict, SubmissionKeyConflict)
    assert fresh[1] is True
    assert completed is not None
    assert completed.status.is_terminal
    assert not_applied is None
    assert gate.commits == 2
    assert stored_ids(path) == {"first", "held", "fresh"}
    assert [change.status.value for change in history] == ["working", "completed"]


async def test_a_write_that_ends_the_transaction_fails_its_whole_batch(tmp_path: Path) -> None:
    """A driver error that ends the batch's transaction (not only a write's savepoint) fails
    every write of the batch: none is answered as done, none is in the file."""
    path = tmp_path / "tasks.db"
    store = SqliteTaskStore(path)

    def ends_the_transaction(conn: sqlite3.Connection) -> None:
        conn.execute("ROLLBACK")  # what SQLite does itself on a full disk or an I/O error
        raise sqlite3.OperationalError("disk I/O error")

    try:
        _, outcomes = await held_then_together(
            store,
            [
                lambda: store.create(new_task("before"), owner="o", lease_until=1e12),
                lambda: store._write(ends_the_transaction),
                lambda: store.create(new_task("after"), owner="o", lease_until=1e12),
            ],
        )
        # The connection is usable again: the next write commits on its own.
        await store.create(new_task("later"), owner="o", lease_until=1e12)
    finally:
        store.close()
    assert all(isinstance(outcome, StoreUnavailable) for outcome in outcomes), outcomes
    assert stored_ids(path) == {"held", "later"}


def test_no_create_is_answered_before_its_commit(tmp_path: Path) -> None:
    """A process dies between its queued creates' inserts and their shared commit: every
    create it answered is in the file, and the ones it never answered are not."""
    path = tmp_path / "tasks.db"
    child = subprocess.run(
        [sys.executable, str(CHILD), str(path), str(QUEUED)],
        capture_output=True,
        text=True,
        timeout=LOADED_MACHINE_S,
        check=False,
    )
    assert child.returncode == CRASHED, (child.returncode, child.stdout, child.stderr)
    lines = [line.split(" ", 1) for line in child.stdout.splitlines()]
    sent = {task_id for word, task_id in lines if word == "sent"}
    answered = {task_id for word, task_id in lines if word == "answered"}
    stored = stored_ids(path)
    in_flight = {f"queued-{n}" for n in range(QUEUED)}
    assert sent == {"before", "held", *in_flight}
    assert answered <= stored  # nothing was answered that a crash could take back
    assert answered == {"before", "held"}
    assert stored.isdisjoint(in_flight)  # the crash hit them before their one commit


async def test_a_connection_left_in_a_transaction_is_never_written_through(
    tmp_path: Path,
) -> None:
    """Writes on a connection something left inside a transaction would be savepoints that
    nothing commits: the batch is refused instead, and the next one gets a new connection."""
    path = tmp_path / "tasks.db"
    store = SqliteTaskStore(path)
    try:
        store.run_sync(lambda conn: conn.execute("BEGIN"))
        with pytest.raises(StoreUnavailable):
            await store.create(new_task("refused"), owner="o", lease_until=1e12)
        await store.create(new_task("accepted"), owner="o", lease_until=1e12)
    finally:
        store.close()
    assert stored_ids(path) == {"accepted"}
