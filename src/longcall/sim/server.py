"""Simulated servers: the truth store and the read path every protocol shares (F1, F3).

:class:`SimServer` keeps what no client can see — every task ever created (also after
expiry), the business request it belongs to, its true terminal and payload, every
status read it received and from which executor — and the faults every protocol's
reads share (429/503 with or without ``Retry-After``, a 404 before expiry, the purge
at expiry, a task id wrongly reused). The wire fronts subclass it:
:class:`~longcall.sim.mcp.McpServer` answers MCP over HTTP (both task versions),
:class:`~longcall.sim.aip151.Aip151Server` AIP-151 (P3) and
:class:`~longcall.sim.apify.ApifyServer` the Apify-style tools (P4).

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

from longcall.adapters.aip151.mapping import PROTOCOL as AIP151
from longcall.adapters.apify.mapping import PROTOCOL as APIFY
from longcall.adapters.exchange import HttpReply
from longcall.core.keys import digest_bytes
from longcall.sim.truth import COMPLETED, FAILED, TERMINAL, VALUE, Plan, ServerFaults, Task

MODERN = "2026-07-28"
LEGACY = "2025-11-25"
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


@dataclasses.dataclass(slots=True, kw_only=True)
class Served:
    """A server's answer to one hop, with what it told the sender (for the gates)."""

    reply: HttpReply
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
    dropped: bool = False
    """The response never arrives (a fault the server's side decided, F1)."""


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
        self._truths: dict[int, tuple[Task, bytes, str]] = {}
        """id(task) -> (task, payload, digest) of a terminal task, made once: a terminal
        never changes (S4), so neither do the bytes it stands for. The entry holds the
        task itself, and the id is only trusted while it names that very task."""

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
        return self._truth(task)[0]

    def truth_digest(self, task: Task) -> str:
        """The digest of :meth:`truth_payload`, as a receipt or a result body carries it."""
        return self._truth(task)[1]

    def _truth(self, task: Task) -> tuple[bytes, str]:
        known = self._truths.get(id(task))
        if known is not None and known[0] is task:
            return known[1], known[2]
        payload = self._payload(task)
        digest = digest_bytes(payload)
        if task.status in TERMINAL:
            self._truths[id(task)] = (task, payload, digest)
        return payload, digest

    def _payload(self, task: Task) -> bytes:
        """What :meth:`truth_payload` returns, made anew (each protocol's own bytes)."""
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


__all__ = [
    "AIP151",
    "APIFY",
    "LEGACY",
    "MCP_PROTOCOLS",
    "MODERN",
    "Hold",
    "Hop",
    "Served",
    "SimServer",
]
