"""Group commit: task writes that arrive together share one transaction and one commit.

Owns: the queue of writes waiting for the store's writer thread, taking them off in
batches, and handing each caller its own outcome — only once the batch's commit has
returned. Must not: know SQL or a driver (the store's ``commit`` callable runs a batch:
each write in a savepoint of its own, then one commit), nor run anything on the event
loop but the hand-over.

Why: with ``synchronous=FULL`` every SQLite commit is an fsync, and one writer thread
made concurrent creates and status changes wait for one fsync each, in a queue. Here the
writes that queued up during one commit are committed by the next one together: one
fsync for the lot, the same durability for each (docs/design/server-task-store.md).

The batches go to the writer thread's queue one at a time, behind whatever other store
work is already there (a lease renewal, a claim), so a stream of writes never holds such
work back; at most :data:`BATCH_LIMIT` writes share a commit.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from longcall.server.errors import StoreUnavailable

T = TypeVar("T")

BATCH_LIMIT = 64
"""Most writes one commit makes durable (bounds how long the first of them waits)."""

Work = Callable[[Any], Any]
"""One write: given the writer's connection (inside the batch's transaction), its result."""


@dataclass(frozen=True, slots=True)
class Failed:
    """A write's outcome when it raised: its own part of the batch was rolled back."""

    error: BaseException


class GroupCommit:
    """Queues writes and has the writer thread commit them in batches.

    ``submit`` schedules a callable on the writer thread (the store's one-thread
    executor); ``commit`` runs there with the batch's writes and returns one outcome per
    write (its result, or :class:`Failed`) after their transaction committed, or raises
    when the batch as a whole did not commit (then every write of it fails with that).
    """

    def __init__(
        self,
        submit: Callable[[Callable[[], None]], object],
        commit: Callable[[Sequence[Work]], list[Any]],
        *,
        limit: int = BATCH_LIMIT,
    ) -> None:
        self._submit = submit
        self._commit = commit
        self._limit = limit
        self._lock = threading.Lock()
        self._pending: list[tuple[Work, concurrent.futures.Future[Any]]] = []
        self._scheduled = False

    async def write(self, work: Callable[[Any], T]) -> T:
        """``work(conn)``'s result once it is committed (or the error it or its batch raised)."""
        future: concurrent.futures.Future[Any] = concurrent.futures.Future()
        with self._lock:
            self._pending.append((work, future))
            schedule = not self._scheduled
            self._scheduled = True
        if schedule:
            self._schedule()
        result: T = await asyncio.wrap_future(future)
        return result

    def _schedule(self) -> None:
        try:
            self._submit(self._drain)
        except RuntimeError:  # the executor was shut down: the store is closed
            self._fail_pending(StoreUnavailable("the task store is closed"))

    def _take(self) -> list[tuple[Work, concurrent.futures.Future[Any]]]:
        """The next batch; the drain stays scheduled while more writes wait beyond it."""
        with self._lock:
            batch = self._pending[: self._limit]
            del self._pending[: self._limit]
            more = bool(self._pending)
            self._scheduled = more
        if more:
            self._schedule()
        return batch

    def _drain(self) -> None:
        """On the writer thread: commit one batch, then answer each of its writes."""
        batch = [(w, f) for w, f in self._take() if f.set_running_or_notify_cancel()]
        if not batch:
            return
        try:
            outcomes = self._commit([work for work, _ in batch])
        except BaseException as exc:
            for _, future in batch:
                future.set_exception(exc)
            return
        for (_, future), outcome in zip(batch, outcomes, strict=True):
            if isinstance(outcome, Failed):
                future.set_exception(outcome.error)
            else:
                future.set_result(outcome)

    def _fail_pending(self, error: BaseException) -> None:
        with self._lock:
            pending, self._pending = self._pending, []
            self._scheduled = False
        for _, future in pending:
            if future.set_running_or_notify_cancel():
                future.set_exception(error)
