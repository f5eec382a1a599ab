"""Simulated task servers that keep the authoritative truth (SPEC F1, F3, P3, P4).

A :class:`SimServer` speaks either MCP task version (``2026-07-28`` extension
semantics or ``2025-11-25`` semantics) in a normalised form: requests are small
tuples, replies are :class:`Reply` values. :class:`Aip151Server` (SPEC P3) and
:class:`ApifyServer` (SPEC P4) keep the same truth and answer with the wire bodies
of their protocols (a ``google.longrunning.Operation``; an Apify run view and dataset
pages) in :attr:`Reply.body`, which the sim adapters map with the real adapters'
rules. It keeps what no client can see: every
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
from typing import Any

from longcall.adapters import aip151 as real_aip151
from longcall.adapters import apify as real_apify
from longcall.core.keys import canonical_json

MODERN = "2026-07-28"
LEGACY = "2025-11-25"
AIP151 = real_aip151.PROTOCOL
APIFY = real_apify.PROTOCOL
MCP_PROTOCOLS = (MODERN, LEGACY)

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
    protocol: str = MODERN
    items: int = 0
    """Apify: the items of the run's default dataset when it succeeds (P4)."""
    cancel_graceful: bool = False
    """Apify: a graceful abort was asked for and has not taken effect yet (ABORTING)."""

    @property
    def expires_at(self) -> float:
        return self.created_at + self.ttl_s

    def payload(self) -> bytes:
        """The true result bytes (completed value or tool error), or cancel evidence.

        AIP-151 and Apify tasks answer the bytes their real adapter builds from the wire
        (the ``response`` Any or the ``google.rpc.Status``; ``{run, items, usage}``)."""
        if self.protocol == AIP151:
            return canonical_json(aip151_result(self))
        if self.protocol == APIFY:
            if self.status == CANCELLED:
                return canonical_json(apify_run(self))
            return apify_payload(self)
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
    body: dict[str, Any] | None = None
    """AIP-151 and Apify: the wire body (an ``Operation``; a run view)."""
    pages: tuple[dict[str, Any] | None, ...] = ()
    usage: dict[str, Any] | None = None
    """Apify: the usage ``_meta`` (``com.apify/ActorRun``) of a run answer."""
    """Apify: the dataset pages of a result read, in order (None: lost on the wire)."""


@dataclasses.dataclass(slots=True, kw_only=True)
class ServerFaults:
    """Per-request probabilities of the server's own faults (F1); zero once healed."""

    id_reuse: float = 0.0
    not_found_early: float = 0.0
    rate_limited: float = 0.0
    unavailable: float = 0.0
    input_replay: float = 0.0
    cancel_completion_tie: float = 0.0
    page_loss: float = 0.0
    """Apify: a dataset page's response is lost on the wire (P4)."""
    page_contradict: float = 0.0
    """Apify: a dataset page whose items contradict its ``itemCount`` (P4, X6)."""
    zero_items: float = 0.0
    """Apify: a run that succeeds with an empty default dataset (P4)."""

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

    # --- the path every status read shares (F1 faults of the poll) --------------------

    expired_counter = "not_found_after_expiry"
    """The fault counter of a read after the task is gone (its name per protocol)."""

    def _retry_after_s(self) -> float | None:
        """The ``Retry-After`` of a 429/503: absent, or a few seconds."""
        return self.rng.choice((None, self.rng.uniform(1.0, 10.0)))

    def _live(self, task_id: str, now: float) -> Task | None:
        task = self.by_id.get(task_id)
        if task is None:
            return None
        if now >= task.expires_at:
            self._count(self.expired_counter)
            return None
        return task

    def _throttled(self) -> Reply | None:
        """A 429 or 503 instead of an answer, when the dice say so (F1)."""
        for error, rate, counter in (
            ("429", self.faults.rate_limited, "poll_429"),
            ("503", self.faults.unavailable, "poll_503"),
        ):
            if self.rng.random() < rate:
                self._count(counter)
                return Reply(error=error, retry_after_s=self._retry_after_s())
        return None

    def _observe(self, task_id: str, now: float) -> Task | Reply:
        """The task as one read sees it (recorded as a poll), or a 404 (F1)."""
        task = self._live(task_id, now)
        if task is None:
            return Reply(error="404")
        if self.rng.random() < self.faults.not_found_early:
            self._count("not_found_before_expiry")
            return Reply(error="404")
        task.polls.append(now)
        task.advance(now)
        return task

    def get(self, task_id: str, now: float) -> Reply:
        """``tasks/get``: status (and, in 2026-07-28, the inlined result)."""
        refused = self._throttled()
        if refused is not None:
            return refused
        task = self._observe(task_id, now)
        if isinstance(task, Reply):
            return task
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


# --- AIP-151 (SPEC P3) --------------------------------------------------------------------

AIP151_METADATA_TYPE = "type.googleapis.com/longcall.v1.OperationMetadata"
AIP151_RESPONSE_TYPE = "type.googleapis.com/google.protobuf.Struct"
AIP151_ERROR_INFO_TYPE = "type.googleapis.com/google.rpc.ErrorInfo"


def aip151_result(task: Task) -> dict[str, Any]:
    """The ``response`` Any of a done operation, or its ``google.rpc.Status``."""
    if task.status == CANCELLED:
        return {"code": real_aip151.CANCELLED_CODE, "message": "the operation was cancelled"}
    if task.status == FAILED:
        return {
            "code": 2,
            "message": f"the tool failed on {task.request}",
            "details": [{"@type": AIP151_ERROR_INFO_TYPE, "reason": real_aip151.TOOL_ERROR_REASON}],
        }
    return {
        "@type": AIP151_RESPONSE_TYPE,
        "value": {"request": task.request, "operation": task.task_id},
    }


class Aip151Server(SimServer):
    """One simulated AIP-151 server (+ AIP-155 ``requestId`` deduplication), P3.

    Starts are deduplicated by ``requestId`` only (AIP-155): a resend with the same id
    answers the operation it already holds, a fresh id creates another one. Cancel is a
    request (200, then the operation ends cooperatively; a completion that wins stays
    completed, X5). Operations are purged after their retention (``ttl_s``), which the
    client is never told: later requests get 404. Operations take no input.
    """

    def __init__(self, name: str, **kwargs: Any) -> None:
        super().__init__(name, protocol=AIP151, **kwargs)
        self.by_request_id: dict[str, Task] = {}

    def _operation(self, task: Task) -> dict[str, Any]:
        metadata = {"pollIntervalMs": self.poll_interval_s * 1000.0}
        body: dict[str, Any] = {
            "name": task.task_id,
            "metadata": {"@type": AIP151_METADATA_TYPE, "value": metadata},
        }
        if task.status not in TERMINAL:
            body["done"] = False
            return body
        body["done"] = True
        result = aip151_result(task)
        body["error" if task.status in (FAILED, CANCELLED) else "response"] = result
        return body

    def _reply(self, task: Task, *, found: bool = False) -> Reply:
        body = self._operation(task)
        payload = None
        if task.status in (COMPLETED, FAILED):
            payload = task.payload()
        return Reply(
            task_id=task.task_id,
            status=task.status,
            poll_interval_s=real_aip151.poll_interval_hint_s(body),
            payload=payload,
            body=body,
            found=found,
        )

    def start(self, request_id: str, key: str, request: str, now: float) -> Reply:
        """``POST /v1/tools/work:start``; an AIP-155 ``requestId`` seen before answers
        the operation it created (S3, X2)."""
        task = self.by_request_id.get(request_id)
        if task is None:
            self.creates += 1
            duration, outcome, _input_at = self.plans[request]
            task = Task(
                task_id=f"{real_aip151.COLLECTION}{self.name}-t{self.creates}",
                key=key,
                request=request,
                created_at=now,
                duration_s=duration,
                outcome=outcome,
                input_at_s=None,
                ttl_s=self.ttl_s,
                protocol=AIP151,
            )
            self.tasks.append(task)
            self.by_id[task.task_id] = task
            self.by_key.setdefault(key, task)
            self.by_request_id[request_id] = task
        task.advance(now)
        return self._reply(task, found=True)

    def list_request(self, request_id: str, now: float) -> Reply:
        """``GET /v1/operations?filter=requestId=…``: proves an operation without creating."""
        task = self.by_request_id.get(request_id)
        if task is None:
            return Reply(found=False)
        task.advance(now)
        return dataclasses.replace(self._reply(task, found=True), poll_interval_s=None)

    expired_counter = "not_found_after_retention"

    def _retry_after_s(self) -> float | None:
        return self.rng.choice((None, 5.0))

    def get(self, task_id: str, now: float) -> Reply:
        """``GetOperation``."""
        refused = self._throttled()
        return refused if refused is not None else self.result(task_id, now)

    def result(self, task_id: str, now: float) -> Reply:
        """``GetOperation`` for the result (the fetch after a restart re-reads, X6)."""
        task = self._observe(task_id, now)
        return task if isinstance(task, Reply) else self._reply(task)

    def cancel(self, task_id: str, now: float, cooperative_s: float) -> Reply:
        """``CancelOperation``: 200 and a cooperative cancel; never a terminal (X5)."""
        task = self._live(task_id, now)
        if task is None:
            return Reply(error="404")
        task.advance(now)
        if task.status in TERMINAL:
            if task.status != CANCELLED:
                self._count("aip151_cancel_races_completion")
            return Reply(task_id=task.task_id)
        effective = now + cooperative_s
        if task.cancel_effective_at is None or effective < task.cancel_effective_at:
            task.cancel_effective_at = effective
        if self.rng.random() < self.faults.cancel_completion_tie:
            # The operation completes exactly when the cancel would take effect: the
            # server's truth decides, and a completion that wins stays completed (X5).
            self._count("aip151_cancel_races_completion")
            task.forced_done_at = task.cancel_effective_at
            task.cancel_wins_tie = self.rng.random() < 0.5
        return Reply(task_id=task.task_id)

    def answer(self, task_id: str, keys: tuple[str, ...], now: float) -> Reply:
        raise ValueError("AIP-151 operations take no input")


# --- Apify-style (SPEC P4) ----------------------------------------------------------------

APIFY_STATUS = {WORKING: "RUNNING", COMPLETED: "SUCCEEDED", FAILED: "FAILED", CANCELLED: "ABORTED"}
APIFY_USAGE = {"usageTotalUsd": 0.0125, "usageUsd": {"ACTOR_COMPUTE_UNITS": 0.0125}}


def apify_run(task: Task) -> dict[str, Any]:
    """The run view (``structuredContent`` of ``get-actor-run``), without model text."""
    status = APIFY_STATUS[task.status]
    if task.status == WORKING and task.cancel_graceful:
        status = "ABORTING"
    count = task.items if task.status == COMPLETED else 0
    return {
        "runId": task.task_id,
        "actId": "work",
        "status": status,
        "storages": {"datasets": {"default": {"id": f"ds-{task.task_id}", "itemCount": count}}},
    }


def apify_items(task: Task) -> list[dict[str, Any]]:
    count = task.items if task.status == COMPLETED else 0
    return [{"request": task.request, "run": task.task_id, "n": n} for n in range(count)]


def apify_payload(task: Task) -> bytes:
    """What the real adapter accepts for a finished run: ``{run, items, usage}``."""
    return canonical_json(
        {"run": apify_run(task), "items": apify_items(task), "usage": APIFY_USAGE}
    )


class ApifyServer(SimServer):
    """One simulated Apify-style MCP server (direct Actor tool + helpers), P4.

    The start and ``get-actor-run`` long-poll: the world holds their answer until the
    run's status changes or ``waitSecs`` ends (:meth:`release_at`). There is no lookup
    by key; creates are deduplicated by the submission key when the server advertises
    the ``dev.longcall/submissionKey`` extension (``lookup`` in the config), or when the
    tool is idempotent (as in the MCP worlds). ``abort-actor-run`` aborts at once, or
    gracefully (ABORTING, then ABORTED). Runs are purged after ``ttl_s``: "not found".
    """

    def __init__(self, name: str, *, graceful: bool, **kwargs: Any) -> None:
        super().__init__(name, protocol=APIFY, **kwargs)
        self.graceful = graceful

    def _reply(self, task: Task) -> Reply:
        return Reply(
            task_id=task.task_id,
            status=task.status,
            poll_interval_s=real_apify.POLL_INTERVAL_S,
            body=apify_run(task),
            usage=dict(APIFY_USAGE),
        )

    def create(self, key: str, request: str, now: float) -> Reply:
        if (self.lookup_offered or self.idempotent) and key in self.by_key:
            task = self.by_key[key]
            task.advance(now)
            return self._reply(task)
        self.creates += 1
        duration, outcome, _input_at = self.plans[request]
        items = self.rng.randint(1, 250)
        if outcome == COMPLETED and self.rng.random() < self.faults.zero_items:
            self._count("apify_zero_items")
            items = 0
        task = Task(
            task_id=f"{self.name}-run{self.creates}",
            key=key,
            request=request,
            created_at=now,
            duration_s=duration,
            outcome=outcome,
            input_at_s=None,
            ttl_s=self.ttl_s,
            protocol=APIFY,
            items=items,
        )
        self.tasks.append(task)
        self.by_id[task.task_id] = task
        self.by_key.setdefault(key, task)
        return self._reply(task)

    def release_at(self, task_id: str, now: float, wait_s: float) -> float:
        """When a long-poll of ``wait_s`` answers: at the run's next change, or the end."""
        task = self.by_id.get(task_id)
        end = now + wait_s
        if task is None:
            return now
        task.advance(now)
        if task.status in TERMINAL:
            return now
        changes = [task.done_at(), task.expires_at]
        if task.cancel_effective_at is not None:
            changes.append(task.cancel_effective_at)
        later = [t for t in changes if t > now]
        return min([end, *later])

    expired_counter = "not_found_after_retention"

    def _retry_after_s(self) -> float | None:
        return self.rng.choice((None, 5.0))

    def view(self, task_id: str, now: float) -> Reply:
        """The run as it is now (the held start's early return)."""
        task = self.by_id[task_id]
        task.advance(now)
        return self._reply(task)

    def get(self, task_id: str, now: float) -> Reply:
        """``get-actor-run`` (its wait already served by the world)."""
        refused = self._throttled()
        if refused is not None:
            return refused
        task = self._observe(task_id, now)
        return task if isinstance(task, Reply) else self._reply(task)

    def result(self, task_id: str, now: float) -> Reply:
        """The run and its default dataset, page by page (``get-dataset-items``, X6).

        A lost page is ``None``; a contradicting page says one item more than it holds.
        ``payload`` is the true accepted body, sent only when every page is intact."""
        task = self._live(task_id, now)
        if task is None:
            return Reply(error="404")
        task.advance(now)
        reply = self._reply(task)
        if task.status not in TERMINAL:
            return reply
        items = apify_items(task)
        limit = real_apify.PAGE_LIMIT_DEFAULT
        pages: list[dict[str, Any] | None] = []
        intact = True
        for offset in range(0, max(1, len(items)), limit):
            chunk = items[offset : offset + limit]
            page: dict[str, Any] | None = {
                "items": chunk,
                "offset": offset,
                "itemCount": len(chunk),
                "totalItemCount": len(items),
            }
            if self.rng.random() < self.faults.page_loss:
                self._count("apify_page_lost")
                pages.append(None)
                intact = False
                break
            if self.rng.random() < self.faults.page_contradict:
                self._count("apify_page_contradicts")
                assert page is not None
                page["itemCount"] = len(chunk) + 1
                intact = False
            pages.append(page)
        payload = task.payload() if intact and task.status != CANCELLED else None
        return dataclasses.replace(reply, pages=tuple(pages), payload=payload)

    def cancel(self, task_id: str, now: float, cooperative_s: float) -> Reply:
        """``abort-actor-run``: at once (ABORTED) or gracefully (ABORTING), X5."""
        task = self._live(task_id, now)
        if task is None:
            return Reply(error="404")
        task.advance(now)
        if task.status not in TERMINAL:
            effective = now + cooperative_s if self.graceful else now
            if task.cancel_effective_at is None or effective < task.cancel_effective_at:
                task.cancel_effective_at = effective
            task.cancel_graceful = self.graceful
            if self.rng.random() < self.faults.cancel_completion_tie:
                # The run ends exactly when the abort lands: the truth's coin decides.
                task.forced_done_at = task.cancel_effective_at
                task.cancel_wins_tie = self.rng.random() < 0.5
            task.advance(now)
        if task.status in (COMPLETED, FAILED):
            # The abort came after the run ended: the run keeps its terminal (X5).
            self._count("apify_abort_races_completion")
        reply = self._reply(task)
        if task.status == CANCELLED:
            reply = dataclasses.replace(reply, payload=task.payload())
        return reply

    def answer(self, task_id: str, keys: tuple[str, ...], now: float) -> Reply:
        raise ValueError("Apify-style runs take no input")
