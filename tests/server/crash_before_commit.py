"""A process that dies between its creates' inserts and their commit (the group-commit test).

Run as ``python tests/server/crash_before_commit.py PATH COUNT``. It opens the SQLite task
store at PATH, commits one create, then holds the store's writer thread while COUNT more
creates queue up behind it, so that they share the next commit — and exits (``os._exit``,
no clean-up, as a crash) the moment that commit is about to run. Before dying it lets the
event loop run, so any create the store had already answered gets its answer written.
Each line it prints is ``sent ID`` before a create is asked for, ``answered ID`` after
the store answered it; the test compares the answered ids with the rows in the file.
"""

from __future__ import annotations

import asyncio
import os
import sys
import threading
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from tests.bounds import LOADED_MACHINE_S

from longcall.server.model import NewTask, ProtocolVersion
from longcall.server.store import SqliteTaskStore

CRASHED = 17
"""The exit status of the crash: the test tells it from any other way to end."""
YIELDS_BEFORE_CRASH = 100
"""Turns of the event loop given to answers already due before the process dies."""


class WriterGate:
    """The trace callback of the store's writer connection: holds the writer at its next
    ``BEGIN IMMEDIATE`` once armed (until opened), counts commits, and calls ``at_commit``
    with the number of the commit about to run."""

    def __init__(self) -> None:
        self.armed = False
        self.entered = threading.Event()
        self.opened = threading.Event()
        self.commits = 0
        self.at_commit = lambda number: None

    def __call__(self, statement: str) -> None:
        if statement == "BEGIN IMMEDIATE" and self.armed:
            self.armed = False
            self.entered.set()
            self.opened.wait(LOADED_MACHINE_S)
        elif statement == "COMMIT":
            self.at_commit(self.commits + 1)
            self.commits += 1


TASK: dict[str, Any] = {
    "principal": "p",
    "tool_name": "tool",
    "arguments": {"n": 1},
    "arguments_digest": "d",
    "protocol": ProtocolVersion.MODERN,
    "submission_key": None,
    "ttl_ms": 3_600_000,
    "poll_interval_ms": 100,
}
"""Every field of the tasks created here but the id and the creation time."""


def new_task(task_id: str) -> NewTask:
    return NewTask(task_id=task_id, created_at=time.time(), **TASK)


async def create(store: SqliteTaskStore, task_id: str) -> None:
    print(f"sent {task_id}", flush=True)
    await store.create(new_task(task_id), owner="crasher", lease_until=time.time() + 60)
    print(f"answered {task_id}", flush=True)


async def main(path: str, count: int) -> None:
    store = SqliteTaskStore(path)
    gate = WriterGate()
    store.run_sync(lambda conn: conn.set_trace_callback(gate))
    loop = asyncio.get_running_loop()

    async def let_answers_out() -> None:
        for _ in range(YIELDS_BEFORE_CRASH):
            await asyncio.sleep(0)

    def crash_at_third(number: int) -> None:
        if number == 3:  # 1: "before", 2: "held", 3: the queued creates' shared commit
            asyncio.run_coroutine_threadsafe(let_answers_out(), loop).result(LOADED_MACHINE_S)
            os._exit(CRASHED)

    gate.at_commit = crash_at_third
    await create(store, "before")
    gate.armed = True
    held = asyncio.ensure_future(create(store, "held"))
    await asyncio.to_thread(gate.entered.wait, LOADED_MACHINE_S)
    queued = [asyncio.ensure_future(create(store, f"queued-{n}")) for n in range(count)]
    await asyncio.sleep(0)  # one turn: every queued create has handed its write over
    gate.opened.set()
    await asyncio.gather(held, *queued)
    print("no crash", flush=True)


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], int(sys.argv[2])))
