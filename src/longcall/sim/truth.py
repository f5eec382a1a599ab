"""What the simulated servers really hold: the authoritative truth (SPEC F1, F3).

Owns :class:`Task` (one remote operation as the server holds it: its request, its
plan, its input rounds, its true terminal and payload, and how a cancel and a
completion race), :class:`Plan` (how the work of one business request goes) and
:class:`ServerFaults` (the server's own fault rates). The gates compare the ledger
with this truth; the wire fronts (:mod:`longcall.sim.mcp`, :mod:`longcall.sim.server`)
only present it.

Must not: know any wire format, read a clock or draw randomness (the server passes
``now`` and its draws in).
"""

from __future__ import annotations

import dataclasses
import math

WORKING = "working"
INPUT_REQUIRED = "input_required"
COMPLETED = "completed"
FAILED = "failed"
CANCELLED = "cancelled"
TERMINAL = (COMPLETED, FAILED, CANCELLED)

VALUE = "value"
"""A plan's outcome: the tool returns a value."""
TOOL_ERROR = "tool_error"
"""A plan's outcome: the tool reports its own error (MCP ``isError: true``)."""
PROTOCOL_ERROR = "protocol_error"
"""A plan's outcome: the call fails with a JSON-RPC error (MCP ``failed``)."""
OUTCOMES = (VALUE, TOOL_ERROR, PROTOCOL_ERROR)


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class Plan:
    """How the work of one business request goes, whoever creates it."""

    duration_s: float
    """Work time, not counting the pauses while input is awaited."""
    outcome: str
    input_offsets_s: tuple[float, ...] = ()
    """Work times at which the tool asks for input, one round each (ascending)."""


@dataclasses.dataclass(slots=True, kw_only=True)
class InputRound:
    """One input request of a task: asked when the work reaches ``offset_s``."""

    offset_s: float
    key: str
    """The request's wire key (2026-07-28 ``inputRequests`` key, 2025-11-25 request id)."""
    answered_at: float | None = None


@dataclasses.dataclass(slots=True, kw_only=True)
class Task:
    """One remote operation as the server really holds it."""

    task_id: str
    key: str
    request: str
    """The business request (its arguments' digest): two tasks for one request are a
    duplicate (F3)."""
    created_at: float
    plan: Plan
    terminal_status: str
    """The status this task ends with when it is not cancelled (per protocol: a
    2026-07-28 tool error is ``completed``, a 2025-11-25 one ``failed``)."""
    rounds: list[InputRound] = dataclasses.field(default_factory=list)
    ttl_s: float = 3600.0
    cancel_effective_at: float | None = None
    forced_done_at: float | None = None
    cancel_wins_tie: bool = False
    status: str = WORKING
    terminal_at: float | None = None
    items: int = 0
    """Apify: the items of the run's default dataset when it succeeds (P4)."""
    cancel_graceful: bool = False
    """Apify: a graceful abort was asked for and has not taken effect yet (ABORTING)."""
    protocol: str = ""

    @property
    def expires_at(self) -> float:
        return self.created_at + self.ttl_s

    @property
    def outcome(self) -> str:
        return self.plan.outcome

    def _walk(self, now: float) -> tuple[InputRound | None, float, float]:
        """(the round awaiting an answer at ``now`` or None, when the work is done given
        the answers so far (inf: not known yet), when the next round is reached)."""
        start, worked = self.created_at, 0.0
        for round_ in self.rounds:
            reach = start + (round_.offset_s - worked)
            if round_.answered_at is None:
                if now >= reach:
                    return round_, math.inf, reach
                return None, math.inf, reach
            start, worked = max(reach, round_.answered_at), round_.offset_s
        return None, start + (self.plan.duration_s - worked), math.inf

    def done_at(self) -> float:
        """When the work completes, given the input answered so far (inf: never yet)."""
        if self.forced_done_at is not None:
            return self.forced_done_at
        return self._walk(math.inf)[1]

    def pending_round(self, now: float) -> InputRound | None:
        """The round the task waits on at ``now`` (it must be advanced to ``now``)."""
        if self.status != INPUT_REQUIRED:
            return None
        return self._walk(now)[0]

    def last_answered(self) -> InputRound | None:
        answered = [r for r in self.rounds if r.answered_at is not None]
        return answered[-1] if answered else None

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
            self.status, self.terminal_at = self.terminal_status, done
            return
        waiting = self._walk(now)[0] is not None
        self.status = INPUT_REQUIRED if waiting else WORKING

    def next_change(self, now: float) -> float:
        """The next time after ``now`` at which this task's status may change."""
        if self.status in TERMINAL:
            return math.inf
        _waiting, done, reach = self._walk(now)
        if self.forced_done_at is not None:
            done = self.forced_done_at
        times = [t for t in (done, reach, self.cancel_effective_at) if t is not None and t > now]
        return min(times, default=math.inf)

    def answer(self, key: str, now: float) -> bool:
        """Take the answer to input request ``key`` (idempotent); True if it was pending."""
        self.advance(now)
        pending = self.pending_round(now)
        if pending is None or pending.key != key:
            return False
        pending.answered_at = now
        self.advance(now)
        return True


@dataclasses.dataclass(slots=True, kw_only=True)
class Rates:
    """Fault probabilities that all drop to zero when the world heals (F1)."""

    def heal(self) -> None:
        for field in dataclasses.fields(self):
            setattr(self, field.name, 0.0)


@dataclasses.dataclass(slots=True, kw_only=True)
class ServerFaults(Rates):
    """Per-request probabilities of the server's own faults (F1); zero once healed."""

    id_reuse: float = 0.0
    not_found_early: float = 0.0
    rate_limited: float = 0.0
    unavailable: float = 0.0
    input_replay: float = 0.0
    cancel_completion_tie: float = 0.0
    refused_unread: float = 0.0
    """A front door answers a request it could not read: HTTP 400 with a JSON-RPC
    error whose ``id`` is null (never the operation's outcome, C3)."""
    crossed_reply: float = 0.0
    """A status or result read is answered with another task's body (C3)."""
    page_loss: float = 0.0
    """Apify: a dataset page's response is lost on the wire (P4)."""
    page_contradict: float = 0.0
    """Apify: a dataset page whose items contradict its ``itemCount`` (P4, X6)."""
    zero_items: float = 0.0
    """Apify: a run that succeeds with an empty default dataset (P4)."""


__all__ = [
    "CANCELLED",
    "COMPLETED",
    "FAILED",
    "INPUT_REQUIRED",
    "OUTCOMES",
    "PROTOCOL_ERROR",
    "TERMINAL",
    "TOOL_ERROR",
    "VALUE",
    "WORKING",
    "InputRound",
    "Plan",
    "Rates",
    "ServerFaults",
    "Task",
]
