"""Simulated servers: the truth store and the read path every protocol shares (F1, F3).

:class:`SimServer` keeps what no client can see — every task ever created (also after
expiry), the business request it belongs to, its true terminal and payload, every
status read it received and from which executor — and the faults every protocol's
reads share (429/503 with or without ``Retry-After``, a 404 before expiry, the purge
at expiry, a task id wrongly reused). The wire fronts subclass it:
:class:`~longcall.sim.mcp.McpServer` answers MCP over HTTP (both task versions);
:class:`Aip151Server` (P3) and :class:`ApifyServer` (P4) still answer the normalised
:class:`Reply` their sim adapters read, until those protocols' mappings are exchanges.

A request reaches a server as a :class:`Hop` (who sent it, for which action, when);
the server answers :class:`Served` (the reply plus what it told whom: the notes the
gates need) or :class:`Hold` (a long poll or a blocking stream: ask again then).

Must not: read a clock or draw from any generator but the world's one
``random.Random``; judge anything (the world and the checks do).
"""

from __future__ import annotations

import dataclasses
import random
from collections.abc import Callable
from typing import Any

from longcall.adapters import aip151 as real_aip151
from longcall.adapters import apify as real_apify
from longcall.adapters.exchange import HttpReply
from longcall.core.keys import canonical_json
from longcall.sim.truth import (
    CANCELLED,
    COMPLETED,
    FAILED,
    INPUT_REQUIRED,
    TERMINAL,
    VALUE,
    WORKING,
    Plan,
    ServerFaults,
    Task,
)

MODERN = "2026-07-28"
LEGACY = "2025-11-25"
AIP151 = real_aip151.PROTOCOL
APIFY = real_apify.PROTOCOL
MCP_PROTOCOLS = (MODERN, LEGACY)


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class Hop:
    """One request on the simulated network, as the network stamps it."""

    client: int
    """The executor process that sent it (a connection's identity)."""
    action: str
    """The engine command it serves (``Poll``, ``FetchResult``…)."""
    node: str
    sent_at: float
    cancel_generation: int = 0


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class Reply:
    """A normalised reply of the AIP-151 and Apify-style servers; ``error`` is None on
    success (their sim adapters read it until those protocols' mappings are exchanges)."""

    error: str | None = None
    """``429``, ``503``, ``404``."""
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
    """Apify: the dataset pages of a result read, in order (None: lost on the wire)."""
    usage: dict[str, Any] | None = None
    """Apify: the usage ``_meta`` (``com.apify/ActorRun``) of a run answer."""


@dataclasses.dataclass(slots=True, kw_only=True)
class Served:
    """A server's answer to one hop, with what it told the sender (for the gates)."""

    reply: HttpReply | Reply
    what: str
    """``create``, ``lookup``, ``status``, ``result``, ``cancel``, ``input``, ``session``."""
    task_id: str | None = None
    interval_s: float | None = None
    """The poll interval this reply carries for ``task_id`` (what the client was told)."""
    retry_after_s: float | None = None
    handed: str | None = None
    """A task id this reply hands to the client (a create or a lookup)."""
    result_digest: str | None = None
    """The digest of the result body this reply carries, as the protocol defines it."""
    absent_key: str | None = None
    """The submission key this reply proves was never used (a lookup's found: false)."""
    stream: bytes | None = None
    """An event-stream body, to be decoded by the receiving driver (it may be cut)."""
    stopped: bool = False
    """The driver ends the stream by its watch (the side channel), not the server."""
    delay_s: float = 0.0
    """Extra time before the last byte leaves (the driver's gathering of siblings)."""
    timed_out: bool = False
    """The request blocked past its time budget: the driver gives up on it."""


@dataclasses.dataclass(frozen=True, slots=True)
class Hold:
    """Not answered yet: serve the request again at ``until`` (a long poll or a
    blocking stream), as ``request`` when it must be asked differently then."""

    until: float
    request: Any = None


Violation = Callable[[str, str], None]
"""(check, detail): a server-side check's finding."""


class SimServer:
    """One simulated server with its truth; subclasses add the wire."""

    protocol: str = ""
    expired_counter = "not_found_after_expiry"
    """The fault counter of a read after the task is gone (its name per protocol)."""

    def __init__(
        self,
        name: str,
        *,
        lookup: bool,
        idempotent: bool,
        poll_interval_s: float,
        ttl_s: float,
        rng: random.Random,
        faults: ServerFaults,
        count: Callable[[str], None],
        violation: Violation | None = None,
    ) -> None:
        self.name = name
        self.lookup_offered = lookup
        self.idempotent = idempotent
        self.poll_interval_s = poll_interval_s
        self.ttl_s = ttl_s
        self.rng = rng
        self.faults = faults
        self._count = count
        self._violation = violation or (lambda check, detail: None)
        self.tasks: list[Task] = []
        """Every task ever created, in creation order: the truth (kept after expiry)."""
        self.by_id: dict[str, Task] = {}
        self.by_key: dict[str, Task] = {}
        self.by_request: dict[str, Task] = {}
        self.creates = 0
        self.handed: set[str] = set()
        """Task ids whose create or lookup reply reached a live executor (the world says)."""
        self.plans: dict[str, Plan] = {}
        """request -> how its work goes (registered by the world)."""
        self.reads: list[tuple[int, float, str, str]] = []
        """Status reads of polls as they arrived: (executor, sent at, task id, call
        node), F3."""
        self.rejected: dict[str, str] = {}
        """request -> the digest of the error a create of it was refused with (its truth
        when no task was ever created)."""
        self.cancels_received: dict[str, int] = {}
        """call node -> the highest cancel generation whose request arrived (X5)."""

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

    def truth_payload(self, task: Task) -> bytes:
        """The bytes a client must accept for ``task``'s terminal (its digest is compared)."""
        raise NotImplementedError

    def terminal_status(self, outcome: str) -> str:
        """The status a task with this plan outcome ends with (AIP-151, Apify: a tool
        error and a protocol error both fail)."""
        return COMPLETED if outcome == VALUE else FAILED

    # --- creation (S3, F1 id reuse) ---------------------------------------------------

    def existing(self, key: str | None, request: str) -> Task | None:
        """The task a create must answer instead of creating one: by the submission key
        when the server honours keys, by the arguments when the tool is idempotent."""
        if key is not None and self.lookup_offered and key in self.by_key:
            return self.by_key[key]
        if self.idempotent and request in self.by_request:
            return self.by_request[request]
        return None

    def new_task(
        self, key: str, request: str, now: float, *, task_id: str, reuse: bool = True
    ) -> Task:
        """Create the task of ``request`` (its id possibly a wrongly reused one, F1)."""
        if reuse:
            # Only ids an executor was actually handed are reused: a reused id nobody
            # ever saw is indistinguishable from a fresh one, for any client.
            live = [
                t
                for t in self.tasks
                if t.request != request and now < t.expires_at and t.task_id in self.handed
            ]
            if live and self.rng.random() < self.faults.id_reuse:
                task_id = self.rng.choice(live).task_id
                self._count("task_id_reused")
        plan = self.plans[request]
        task = Task(
            task_id=task_id,
            key=key,
            request=request,
            created_at=now,
            plan=plan,
            terminal_status=self.terminal_status(plan.outcome),
            ttl_s=self.ttl_s,
            protocol=self.protocol,
        )
        self.tasks.append(task)
        # A reused id keeps answering for the task that had it first (the store kept
        # the older row): the new creator is handed an id that names another task.
        self.by_id.setdefault(task_id, task)
        if key:
            self.by_key.setdefault(key, task)
        self.by_request.setdefault(request, task)
        return task

    # --- the read path every protocol shares (F1 faults) ------------------------------

    def retry_after_s(self) -> float | None:
        """The ``Retry-After`` of a 429/503: absent, or a few whole seconds."""
        return self.rng.choice((None, float(self.rng.randint(1, 10))))

    def live(self, task_id: str, now: float) -> Task | None:
        """The task an id names, unless it was never created or is gone (expiry)."""
        task = self.by_id.get(task_id)
        if task is None:
            return None
        if now >= task.expires_at:
            self._count(self.expired_counter)
            return None
        task.advance(now)
        return task

    def throttled(self) -> tuple[int, float | None] | None:
        """A 429 or 503 (and its Retry-After) instead of an answer, when the dice say so."""
        for status, rate, counter in (
            (429, self.faults.rate_limited, "poll_429"),
            (503, self.faults.unavailable, "poll_503"),
        ):
            if self.rng.random() < rate:
                self._count(counter)
                return status, self.retry_after_s()
        return None

    def observe(self, task_id: str, now: float, hop: Hop | None) -> Task | None:
        """The task as one status read sees it (recorded as a poll), or None: a 404,
        after expiry or, when the dice say so, before it (F1)."""
        task = self.live(task_id, now)
        if task is None:
            return None
        if self.rng.random() < self.faults.not_found_early:
            self._count("not_found_before_expiry")
            return None
        if hop is not None and hop.action == "Poll":
            self.reads.append((hop.client, hop.sent_at, task.task_id, hop.node))
        return task

    def note_cancel(self, hop: Hop | None) -> None:
        """A cancel request of this generation arrived (the X5 ack check needs it)."""
        if hop is not None and hop.action == "SendCancel":
            known = self.cancels_received.get(hop.node, 0)
            self.cancels_received[hop.node] = max(known, hop.cancel_generation)

    def cancel_task(self, task: Task, now: float, *, effective: float, tie: str) -> None:
        """Make a live task's cancel take effect at ``effective``; a completion landing
        exactly then is decided by a coin the truth keeps (F1 counter ``tie``)."""
        if task.cancel_effective_at is None or effective < task.cancel_effective_at:
            task.cancel_effective_at = effective
        if self.rng.random() < self.faults.cancel_completion_tie:
            self._count(tie)
            task.forced_done_at = task.cancel_effective_at
            task.cancel_wins_tie = self.rng.random() < 0.5
        task.advance(now)


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

    protocol = AIP151
    expired_counter = "not_found_after_retention"

    def __init__(self, name: str, **kwargs: Any) -> None:
        super().__init__(name, **kwargs)
        self.by_request_id: dict[str, Task] = {}

    def truth_payload(self, task: Task) -> bytes:
        return canonical_json(aip151_result(task))

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
            payload = self.truth_payload(task)
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
            task_id = f"{real_aip151.COLLECTION}{self.name}-t{self.creates}"
            task = self.new_task(key, request, now, task_id=task_id, reuse=False)
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

    def retry_after_s(self) -> float | None:
        return self.rng.choice((None, 5.0))

    def get(self, task_id: str, now: float, hop: Hop | None = None) -> Reply:
        """``GetOperation``."""
        refused = self.throttled()
        if refused is not None:
            return Reply(error=str(refused[0]), retry_after_s=refused[1])
        return self.result(task_id, now, hop)

    def result(self, task_id: str, now: float, hop: Hop | None = None) -> Reply:
        """``GetOperation`` for the result (the fetch after a restart re-reads, X6)."""
        task = self.observe(task_id, now, hop)
        return Reply(error="404") if task is None else self._reply(task)

    def cancel(self, task_id: str, now: float, cooperative_s: float) -> Reply:
        """``CancelOperation``: 200 and a cooperative cancel; never a terminal (X5)."""
        task = self.live(task_id, now)
        if task is None:
            return Reply(error="404")
        if task.status in TERMINAL:
            if task.status != CANCELLED:
                self._count("aip151_cancel_races_completion")
            return Reply(task_id=task.task_id)
        # A completion landing exactly on the cancel is decided by the truth's coin, and
        # a completion that wins stays completed (X5).
        self.cancel_task(
            task, now, effective=now + cooperative_s, tie="aip151_cancel_races_completion"
        )
        return Reply(task_id=task.task_id)


# --- Apify-style (SPEC P4) ----------------------------------------------------------------

APIFY_STATUS = {WORKING: "RUNNING", COMPLETED: "SUCCEEDED", FAILED: "FAILED", CANCELLED: "ABORTED"}
APIFY_USAGE = {"usageTotalUsd": 0.0125, "usageUsd": {"ACTOR_COMPUTE_UNITS": 0.0125}}


def apify_run(task: Task) -> dict[str, Any]:
    """The run view (``structuredContent`` of ``get-actor-run``), without model text."""
    status = APIFY_STATUS[task.status if task.status != INPUT_REQUIRED else WORKING]
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

    protocol = APIFY
    expired_counter = "not_found_after_retention"

    def __init__(self, name: str, *, graceful: bool, **kwargs: Any) -> None:
        super().__init__(name, **kwargs)
        self.graceful = graceful

    def truth_payload(self, task: Task) -> bytes:
        if task.status == CANCELLED:
            return canonical_json(apify_run(task))
        return apify_payload(task)

    def _reply(self, task: Task) -> Reply:
        return Reply(
            task_id=task.task_id,
            status=task.status,
            poll_interval_s=real_apify.POLL_INTERVAL_S,
            body=apify_run(task),
            usage=dict(APIFY_USAGE),
        )

    def create(self, key: str, request: str, now: float) -> Reply:
        dedup = (self.lookup_offered or self.idempotent) and key in self.by_key
        if dedup:
            task = self.by_key[key]
            task.advance(now)
            return self._reply(task)
        self.creates += 1
        task = self.new_task(
            key, request, now, task_id=f"{self.name}-run{self.creates}", reuse=False
        )
        task.items = self.rng.randint(1, 250)
        if task.outcome == VALUE and self.rng.random() < self.faults.zero_items:
            self._count("apify_zero_items")
            task.items = 0
        return self._reply(task)

    def release_at(self, task_id: str, now: float, wait_s: float) -> float:
        """When a long-poll of ``wait_s`` answers: at the run's next change, or the end."""
        task = self.by_id.get(task_id)
        if task is None:
            return now
        task.advance(now)
        if task.status in TERMINAL:
            return now
        return min(now + wait_s, task.next_change(now), max(task.expires_at, now))

    def retry_after_s(self) -> float | None:
        return self.rng.choice((None, 5.0))

    def view(self, task_id: str, now: float) -> Reply:
        """The run as it is now (the held start's early return)."""
        task = self.by_id[task_id]
        task.advance(now)
        return self._reply(task)

    def get(self, task_id: str, now: float, hop: Hop | None = None) -> Reply:
        """``get-actor-run`` (its wait already served by the world)."""
        refused = self.throttled()
        if refused is not None:
            return Reply(error=str(refused[0]), retry_after_s=refused[1])
        task = self.observe(task_id, now, hop)
        return Reply(error="404") if task is None else self._reply(task)

    def result(self, task_id: str, now: float, hop: Hop | None = None) -> Reply:
        """The run and its default dataset, page by page (``get-dataset-items``, X6).

        A lost page is ``None``; a contradicting page says one item more than it holds.
        ``payload`` is the true accepted body, sent only when every page is intact."""
        task = self.live(task_id, now)
        if task is None:
            return Reply(error="404")
        reply = self._reply(task)
        if task.status not in TERMINAL:
            return reply
        items = apify_items(task)
        limit = real_apify.PAGE_LIMIT_DEFAULT
        pages: list[dict[str, Any] | None] = []
        intact = True
        for offset in range(0, max(1, len(items)), limit):
            chunk = items[offset : offset + limit]
            page: dict[str, Any] = {
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
                page["itemCount"] = len(chunk) + 1
                intact = False
            pages.append(page)
        payload = self.truth_payload(task) if intact and task.status != CANCELLED else None
        return dataclasses.replace(reply, pages=tuple(pages), payload=payload)

    def cancel(self, task_id: str, now: float, cooperative_s: float) -> Reply:
        """``abort-actor-run``: at once (ABORTED) or gracefully (ABORTING), X5."""
        task = self.live(task_id, now)
        if task is None:
            return Reply(error="404")
        if task.status not in TERMINAL:
            effective = now + cooperative_s if self.graceful else now
            task.cancel_graceful = self.graceful
            # The run ends exactly when the abort lands: the truth's coin decides.
            self.cancel_task(task, now, effective=effective, tie="apify_abort_races_completion")
        if task.status in (COMPLETED, FAILED):
            # The abort came after the run ended: the run keeps its terminal (X5).
            self._count("apify_abort_races_completion")
        reply = self._reply(task)
        if task.status == CANCELLED:
            reply = dataclasses.replace(reply, payload=self.truth_payload(task))
        return reply


__all__ = [
    "AIP151",
    "APIFY",
    "LEGACY",
    "MCP_PROTOCOLS",
    "MODERN",
    "Aip151Server",
    "ApifyServer",
    "Hold",
    "Hop",
    "Reply",
    "Served",
    "SimServer",
]
