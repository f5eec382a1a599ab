"""Simulated task servers that keep the authoritative truth (SPEC F1, F3).

A :class:`SimServer` speaks either MCP task version (``2026-07-28`` extension
semantics or ``2025-11-25`` semantics) in a normalised form: requests are small
tuples, replies are :class:`Reply` values. It keeps what no client can see: every
task ever created (also after expiry), the request it was created for, its true
terminal and payload, and every poll it received. The gates compare the ledger with
this truth.

The server's own faults (a wrongly reused task id, a 404 before expiry, 429/503 on
``tasks/get``, a replayed ``input_required``, a completion landing exactly on a
cancel) are injected here, never in ``core`` or ``runtime``. Every random draw comes
from the world's one ``random.Random``; the server never reads a clock.
"""

from __future__ import annotations

import dataclasses
import random
from collections.abc import Callable

from longcall.core.keys import canonical_json

MODERN = "2026-07-28"
LEGACY = "2025-11-25"

WORKING = "working"
INPUT_REQUIRED = "input_required"
COMPLETED = "completed"
FAILED = "failed"
CANCELLED = "cancelled"
TERMINAL = (COMPLETED, FAILED, CANCELLED)
INPUT_KEY = "approve"


@dataclasses.dataclass(slots=True, kw_only=True)
class Task:
    """One remote operation as the server really holds it."""

    task_id: str
    key: str
    request: str
    """The business request (arguments digest): two tasks for one request are a duplicate."""
    created_at: float
    duration_s: float
    outcome: str
    input_at_s: float | None
    answered_at: float | None = None
    cancel_effective_at: float | None = None
    forced_done_at: float | None = None
    cancel_wins_tie: bool = False
    status: str = WORKING
    terminal_at: float | None = None
    polls: list[float] = dataclasses.field(default_factory=list)

    ttl_s: float = 3600.0

    @property
    def expires_at(self) -> float:
        return self.created_at + self.ttl_s

    def payload(self) -> bytes:
        """The true result bytes (completed value or tool error), or cancel evidence."""
        if self.status == CANCELLED:
            return canonical_json({"taskId": self.task_id, "status": CANCELLED})
        body = {"isError": self.outcome == FAILED, "request": self.request, "task": self.task_id}
        return canonical_json(body)

    def done_at(self) -> float:
        """When the work completes, given the input answered so far (inf: never yet)."""
        if self.forced_done_at is not None:
            return self.forced_done_at
        if self.input_at_s is not None:
            if self.answered_at is None:
                return float("inf")
            paused = max(0.0, self.answered_at - (self.created_at + self.input_at_s))
            return self.created_at + self.duration_s + paused
        return self.created_at + self.duration_s

    def advance(self, now: float) -> None:
        """Bring the task's status to ``now`` (terminal statuses never change, S4)."""
        if self.status in TERMINAL:
            return
        done = self.done_at()
        cancel = self.cancel_effective_at
        if (
            cancel is not None
            and now >= cancel
            and (cancel < done or (cancel == done and self.cancel_wins_tie))
        ):
            self.status, self.terminal_at = CANCELLED, cancel
            return
        if now >= done:
            self.status, self.terminal_at = self.outcome, done
            return
        waiting = (
            self.input_at_s is not None
            and self.answered_at is None
            and now >= self.created_at + self.input_at_s
        )
        self.status = INPUT_REQUIRED if waiting else WORKING


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class Reply:
    """A normalised server reply; ``error`` is None on success."""

    error: str | None = None
    """``429``, ``503``, ``404``, ``-32602`` (2025-11-25 cancel on a terminal task)."""
    retry_after_s: float | None = None
    task_id: str | None = None
    status: str | None = None
    poll_interval_s: float | None = None
    ttl_s: float | None = None
    input_keys: tuple[str, ...] = ()
    payload: bytes | None = None
    content_length: int | None = None
    found: bool = False


@dataclasses.dataclass(slots=True, kw_only=True)
class ServerFaults:
    """Per-request probabilities of the server's own faults (F1); zero once healed."""

    id_reuse: float = 0.0
    not_found_early: float = 0.0
    rate_limited: float = 0.0
    unavailable: float = 0.0
    input_replay: float = 0.0
    cancel_completion_tie: float = 0.0

    def heal(self) -> None:
        for field in dataclasses.fields(self):
            setattr(self, field.name, 0.0)


class SimServer:
    """One simulated MCP task server (one protocol version) with its truth."""

    def __init__(
        self,
        name: str,
        *,
        protocol: str,
        lookup: bool,
        idempotent: bool,
        poll_interval_s: float,
        ttl_s: float,
        rng: random.Random,
        faults: ServerFaults,
        count: Callable[[str], None],
    ) -> None:
        self.name = name
        self.protocol = protocol
        self.lookup_offered = lookup
        self.idempotent = idempotent
        self.poll_interval_s = poll_interval_s
        self.ttl_s = ttl_s
        self.rng = rng
        self.faults = faults
        self._count = count
        self.tasks: list[Task] = []
        """Every task ever created, in creation order: the truth (kept after expiry)."""
        self.by_id: dict[str, Task] = {}
        self.by_key: dict[str, Task] = {}
        self.creates = 0
        self.handed: set[str] = set()
        """Task ids whose create or lookup reply reached an executor (the world says)."""
        self.plans: dict[str, tuple[float, str, float | None]] = {}
        """request -> (duration, outcome, input offset): how the work of a request goes."""

    # --- truth -----------------------------------------------------------------------

    def truth(self, request: str, now: float) -> Task | None:
        """The authoritative task of a request: the first one created for it."""
        for task in self.tasks:
            if task.request == request:
                task.advance(now)
                return task
        return None

    def duplicates(self) -> int:
        """Second (third…) tasks created for one business request (F3 gate)."""
        seen: set[str] = set()
        extra = 0
        for task in self.tasks:
            if task.request in seen:
                extra += 1
            seen.add(task.request)
        return extra

    # --- requests --------------------------------------------------------------------

    def create(self, key: str, request: str, now: float) -> Reply:
        # S3: a retried create with the same key maps to the same task, when the server
        # honours keys (lookup extension) or the tool is idempotent by its arguments.
        if (self.lookup_offered or self.idempotent) and key in self.by_key:
            task = self.by_key[key]
            return self._created(task)
        self.creates += 1
        task_id = f"{self.name}-t{self.creates}"
        # Only ids an executor was actually handed are reused: a reused id nobody ever
        # saw is indistinguishable from a fresh one, for any client.
        live = [
            t
            for t in self.tasks
            if t.request != request and now < t.expires_at and t.task_id in self.handed
        ]
        if live and self.rng.random() < self.faults.id_reuse:
            # F1 "task id wrongly reused": the new task gets a live task's id.
            task_id = self.rng.choice(live).task_id
            self._count("task_id_reused")
        duration, outcome, input_at = self.plans[request]
        task = Task(
            task_id=task_id,
            key=key,
            request=request,
            created_at=now,
            duration_s=duration,
            outcome=outcome,
            input_at_s=input_at,
            ttl_s=self.ttl_s,
        )
        self.tasks.append(task)
        # A reused id keeps answering for the task that had it first (the store kept
        # the older row): the new creator is handed an id that names another task.
        self.by_id.setdefault(task_id, task)
        self.by_key.setdefault(key, task)
        return self._created(task)

    def _created(self, task: Task) -> Reply:
        return Reply(
            task_id=task.task_id,
            status=WORKING,
            poll_interval_s=self.poll_interval_s,
            ttl_s=self.ttl_s,
        )

    def lookup(self, key: str, now: float) -> Reply:
        """The ``longcall`` lookup-by-submission-key extension (S3); keys outlive expiry."""
        task = self.by_key.get(key)
        if task is None:
            return Reply(found=False)
        return Reply(
            found=True, task_id=task.task_id, poll_interval_s=self.poll_interval_s, ttl_s=None
        )

    def _live(self, task_id: str, now: float) -> Task | None:
        task = self.by_id.get(task_id)
        if task is None:
            return None
        if now >= task.expires_at:
            self._count("not_found_after_expiry")
            return None
        return task

    def get(self, task_id: str, now: float) -> Reply:
        """``tasks/get``: status (and, in 2026-07-28, the inlined result)."""
        if self.rng.random() < self.faults.rate_limited:
            self._count("poll_429")
            retry = self.rng.choice((None, self.rng.uniform(1.0, 10.0)))
            return Reply(error="429", retry_after_s=retry)
        if self.rng.random() < self.faults.unavailable:
            self._count("poll_503")
            retry = self.rng.choice((None, self.rng.uniform(1.0, 10.0)))
            return Reply(error="503", retry_after_s=retry)
        task = self._live(task_id, now)
        if task is None:
            return Reply(error="404")
        if self.rng.random() < self.faults.not_found_early:
            self._count("not_found_before_expiry")
            return Reply(error="404")
        task.polls.append(now)
        task.advance(now)
        status = task.status
        keys: tuple[str, ...] = (INPUT_KEY,) if status == INPUT_REQUIRED else ()
        if (
            status == WORKING
            and task.answered_at is not None
            and self.rng.random() < self.faults.input_replay
        ):
            # F1 "input_required replayed": a stale snapshot of the answered round.
            self._count("input_required_replayed")
            status, keys = INPUT_REQUIRED, (INPUT_KEY,)
        payload = None
        if status in TERMINAL and (self.protocol == MODERN or status == CANCELLED):
            payload = task.payload()
        return Reply(
            task_id=task.task_id,
            status=status,
            poll_interval_s=self.poll_interval_s,
            input_keys=keys,
            payload=payload,
            content_length=None if payload is None else len(payload),
        )

    def result(self, task_id: str, now: float) -> Reply:
        """2025-11-25 ``tasks/result`` (2026-07-28 fetches through ``tasks/get``)."""
        if self.protocol == MODERN:
            return self.get(task_id, now)
        task = self._live(task_id, now)
        if task is None:
            return Reply(error="404")
        task.advance(now)
        if task.status not in TERMINAL:
            return Reply(error="blocked", task_id=task.task_id, status=task.status)
        payload = task.payload()
        return Reply(
            task_id=task.task_id, status=task.status, payload=payload, content_length=len(payload)
        )

    def cancel(self, task_id: str, now: float, cooperative_s: float) -> Reply:
        """``tasks/cancel``: 2025-11-25 cancels before answering (-32602 when terminal);
        2026-07-28 only acknowledges and cancels cooperatively later (S4, X5)."""
        task = self._live(task_id, now)
        if task is None:
            return Reply(error="404")
        task.advance(now)
        if task.status in TERMINAL:
            return Reply(error="-32602" if self.protocol == LEGACY else None, status=task.status)
        effective = now if self.protocol == LEGACY else now + cooperative_s
        if task.cancel_effective_at is None or effective < task.cancel_effective_at:
            task.cancel_effective_at = effective
        if self.rng.random() < self.faults.cancel_completion_tie:
            # F1 "completion and cancel arriving together": the server's truth decides.
            self._count("completion_cancel_together")
            task.forced_done_at = task.cancel_effective_at
            task.cancel_wins_tie = self.rng.random() < 0.5
        task.advance(now)
        if self.protocol == LEGACY:
            if task.status != CANCELLED:
                return Reply(error="-32602", status=task.status)
            payload = task.payload()
            return Reply(task_id=task.task_id, status=CANCELLED, payload=payload)
        return Reply(task_id=task.task_id)

    def answer(self, task_id: str, keys: tuple[str, ...], now: float) -> Reply:
        """Input delivery (``tasks/update`` or the 2025-11-25 side channel), idempotent."""
        task = self._live(task_id, now)
        if task is None:
            return Reply(error="404")
        task.advance(now)
        if INPUT_KEY in keys and task.answered_at is None and task.status == INPUT_REQUIRED:
            task.answered_at = now
        return Reply(task_id=task.task_id)
