"""When each planned request may leave: timers and admission, with ``now`` in, actions out.

Owns: the timer heap (one pending request per operation and request kind, ties served
cancel first), what is in flight (a request of a kind in flight defers the next one of
that kind), admission — the per-server poll token bucket and the strict sliding window
at the moment a poll leaves (X3), a 429/503's Retry-After that holds every request to
its server (X3, X9), the per-server circuit breaker (X9) —, the send slots of the
shared poll budget once granted (X3, several workers), and when each operation was
last polled (a push never polls sooner than the server's interval after it, X3 rule 1).

Must not: read a clock, draw a random number, await or touch the ledger: ``now`` is an
argument, and the send slots come in through :meth:`Scheduler.assign_slots` after the
caller took them from the ledger for what :meth:`Scheduler.slot_wants` asked. It does not
decide what an operation needs (the core machine does) nor which operations this
process holds (the engine passes its records in).
"""

from __future__ import annotations

import collections
import dataclasses
import heapq
import itertools
import math
from collections.abc import Container, Iterable, Iterator, Mapping

from longcall.core import OperationRecord, Policy, commands, events
from longcall.core.retry import CircuitBreaker
from longcall.core.schedule import TokenBucket, WindowLimit, poll_delay_s
from longcall.ledger.budget import GRANT_HORIZON_S, SLOT_VALID_S

FORGET_LET_GO_POLL_S = 3600.0
"""How long a process remembers its last poll of an operation it let go (a claim back
within that time keeps the server's interval after it, X3 rule 1)."""

REQUEST_COMMANDS: tuple[type[commands.Command], ...] = (
    commands.SendCancel,
    commands.SendSubmit,
    commands.LookupSubmission,
    commands.SendInputResponse,
    commands.FetchResult,
    commands.Poll,
)
"""Commands that become a request to the server, in the order a tie is served."""
_PRIORITY = {cls.__name__: rank for rank, cls in enumerate(REQUEST_COMMANDS)}
# Requests that read an operation's status from the server: with several workers they
# all draw send slots from the server's one budget (X3) — a result fetch is a
# ``tasks/get`` too in 2026-07-28, and the server's load is what the cap protects.
_BUDGETED = frozenset({"Poll", "FetchResult"})

_Key = tuple[str, str]
"""(call node, request kind)."""


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class Action:
    """One request for the driver to send, for one operation at one execution epoch."""

    call_node_id: str
    server: str
    command: commands.Command
    record: OperationRecord
    """The record as it was when the action was issued (its epoch fences the reply)."""
    not_after: float | None = None
    """A poll's send slot ends here: later than this it must not leave (X3, the shared
    budget); the driver reports ``Engine.slot_missed`` instead."""

    @property
    def kind(self) -> str:
        return self.command.name

    def slot_passed(self, now: float) -> bool:
        """Whether the send slot this action holds has ended at ``now`` (never, without
        one): every driver asks this, before the adapter call and as the bytes leave."""
        return self.not_after is not None and now > self.not_after


class Scheduler:
    """The planned requests of one process and the limits they leave under."""

    def __init__(
        self,
        *,
        policy: Policy,
        poll_qps_max: float,
        server_qps_max: Mapping[str, float],
        poll_burst: float,
        breaker: CircuitBreaker,
        stats: collections.Counter[str],
    ) -> None:
        self.policy = policy
        self.poll_qps_max = poll_qps_max
        self.server_qps_max = dict(server_qps_max)
        """Per-server caps that replace ``poll_qps_max`` (a servers file's, C1)."""
        self.poll_burst = poll_burst
        self.stats = stats
        self._breaker_template = breaker
        self.breakers: dict[str, CircuitBreaker] = {}
        self.polls_by_server: collections.Counter[str] = collections.Counter()
        self.failures_by_server: collections.Counter[str] = collections.Counter()
        self._timers: list[tuple[float, int, int, str, str]] = []
        self._pending: dict[_Key, tuple[float, int, commands.Command]] = {}
        self._token_held: set[_Key] = set()
        self._in_flight: set[_Key] = set()
        self._deferred: set[_Key] = set()
        self._seq = itertools.count()
        self._buckets: dict[str, TokenBucket] = {}
        self._windows: dict[str, WindowLimit] = {}
        self._not_before: dict[str, float] = {}
        """Per server: a 429/503's Retry-After holds every request to it until then (X3,
        X9), whichever operation's request met it (found by the simulator's Retry-After
        gate), and also one issued before the Retry-After arrived but not yet sent
        (:meth:`held`)."""
        self.poll_queue: dict[str, collections.deque[tuple[str, str, int]]] = {}
        """Per server, the status reads (node, kind, plan) due and waiting for a slot (the
        engine asks for grants only while one waits)."""
        self._slot_of: dict[_Key, float] = {}
        """The send slot assigned to an operation's next status read."""
        self._granted_until: dict[str, float] = {}
        """Per server, the last send slot this process was granted."""
        self.last_poll_at: dict[str, float] = {}
        """When each operation's last poll left: a push never polls sooner than the
        server's interval after it (X3 rule 1)."""
        self._let_go_polls: collections.deque[tuple[float, str]] = collections.deque()
        """(last poll, node) of the operations let go, in the order they were let go."""
        self._results_in_hand: set[str] = set()
        """Operations whose result the adapter already holds (a poll's reply inlined
        it): their next result fetch sends nothing, so it takes no send slot."""
        self._told_when_fenced: dict[str, float] = {}
        """The poll interval of a reply whose write was refused as Fenced (the ledger
        never learnt it), for as long as :attr:`last_poll_at` remembers the poll."""

    # --- planning ------------------------------------------------------------------------

    def plan(self, node: str, command: commands.Command, at: float) -> None:
        """Plan ``command`` (a request command) for ``at``, replacing one of its kind."""
        kind = command.name
        seq = next(self._seq)
        self._pending[(node, kind)] = (at, seq, command)
        heapq.heappush(self._timers, (at, _PRIORITY[kind], seq, node, kind))

    def stop_polling(self, node: str) -> None:
        """Drop the planned poll of an operation that must not be polled now."""
        self._pending.pop((node, "Poll"), None)
        self._token_held.discard((node, "Poll"))

    def forget(self, node: str) -> None:
        """Drop every planned request of ``node`` (and its held tokens and slots)."""
        self._results_in_hand.discard(node)
        for cls in REQUEST_COMMANDS:
            self._pending.pop((node, cls.__name__), None)
            self._token_held.discard((node, cls.__name__))
            self._slot_of.pop((node, cls.__name__), None)

    def finished(self, node: str) -> None:
        """``node`` reached a terminal state: nothing of it is kept."""
        self.forget(node)
        self.last_poll_at.pop(node, None)

    def result_in_hand(self, node: str) -> None:
        """The driver's adapter holds ``node``'s result (the terminal poll's reply
        inlined it): its next result fetch reads it locally, so it waits for no send
        slot of the shared budget (X3 protects the server, and nothing is sent)."""
        self._results_in_hand.add(node)

    def let_go(self, node: str) -> None:
        """This process stops driving ``node``. Its last poll is kept: should it claim
        the operation back, the server's interval after that poll still floors the next
        one (:meth:`keep_poll_floor`)."""
        self.forget(node)
        last = self.last_poll_at.get(node)
        if last is not None:
            self._let_go_polls.append((last, node))

    def told_when_fenced(self, node: str, poll_interval_s: float) -> None:
        """The server told this process ``poll_interval_s`` in a reply whose write was
        refused as Fenced: it floors this process's next poll should it claim ``node``
        back (X3), whatever the ledger holds."""
        self._told_when_fenced[node] = poll_interval_s

    def forget_old_let_go_polls(self, now: float, *, held: Container[str]) -> None:
        """Drop the kept last polls of let-go operations older than
        ``FORGET_LET_GO_POLL_S``, oldest first (no scan of everything held)."""
        kept = self._let_go_polls
        while kept and now - kept[0][0] > FORGET_LET_GO_POLL_S:
            at, node = kept.popleft()
            if node not in held and self.last_poll_at.get(node) == at:
                del self.last_poll_at[node]
                self._told_when_fenced.pop(node, None)

    def keep_poll_floor(self, record: OperationRecord) -> None:
        """``record`` was just taken over and planned: if this process polled it before it
        was let go (a rollback's rebind, a lease lost and won back), the server's
        interval after that poll still stands (X3 rule 1); the stored record does not
        know of it."""
        node = record.call_node_id
        last = self.last_poll_at.get(node)
        planned = self._pending.get((node, "Poll"))
        if last is not None and planned is not None:
            told = self._told_when_fenced.pop(node, None)
            at = last + self.poll_floor_s(record, told=told)
            if planned[0] < at:
                self.plan(node, planned[2], at)

    def wake(self, record: OperationRecord, *, now: float) -> None:
        """A push says something changed: poll ``record`` soon, but not sooner than the
        server's interval after the previous poll of this process, and not during a
        failure backoff (its backoff and any Retry-After stand: X3, X9)."""
        node = record.call_node_id
        planned = self._pending.get((node, "Poll"))
        if planned is None or record.failed_attempts > 0:
            return
        at = now
        last = self.last_poll_at.get(node)
        if last is not None:
            # X3 rule 1: the server's interval is the floor between two polls, pushed or not.
            at = max(now, last + self.poll_floor_s(record))
        if planned[0] > at:
            self.plan(node, planned[2], at)

    def poll_floor_s(self, record: OperationRecord, *, told: float | None = None) -> float:
        """The least time between two polls of ``record`` (X3 rule 1); ``told``: an
        interval the server told this process that the record does not hold."""
        interval = record.poll_interval_s
        if told is not None:
            interval = told if interval is None else max(interval, told)
        return poll_delay_s(
            self.policy.poll, server_interval_s=interval, backoff_step=0, jitter=0.0
        )

    # --- sending -------------------------------------------------------------------------

    def next_wakeup(self) -> float | None:
        """The earliest planned request, or the moment polls waiting for a send slot
        ask for more (None when nothing is planned)."""
        wake: float | None = None
        while self._timers:
            at, _, seq, node, kind = self._timers[0]
            if self._pending.get((node, kind), (None, None))[1] == seq:
                wake = at
                break
            heapq.heappop(self._timers)
        for server, queue in self.poll_queue.items():
            if queue:
                at = self._granted_until.get(server, -math.inf) - GRANT_HORIZON_S
                wake = at if wake is None else min(wake, at)
        return wake

    def due(
        self,
        now: float,
        records: Mapping[str, OperationRecord],
        *,
        shared: bool,
        limit: int | None = None,
    ) -> list[Action]:
        """Pop the requests of ``records`` whose time has come, within the server's limits
        (at most ``limit`` of them: the driver's free sending capacity). ``shared``: the
        status reads draw send slots from the servers' one budget (several workers)."""
        actions: list[Action] = []
        while self._timers and self._timers[0][0] <= now:
            if limit is not None and len(actions) >= limit:
                break
            _at, _, seq, node, kind = heapq.heappop(self._timers)
            planned = self._pending.get((node, kind))
            if planned is None or planned[1] != seq:
                continue  # replaced by a later plan
            record = records.get(node)
            if record is None:
                continue
            if (node, kind) in self._in_flight:
                # Re-armed when the request in flight comes back: its reply may be
                # stale and plan nothing (a newer cancel generation, found by the
                # simulator), and this command must not be lost then.
                self._deferred.add((node, kind))
                continue
            server = record.server
            breaker = self.breakers.get(server, self._breaker_template)
            if not breaker.allows(now):
                retry_at = breaker.retry_at() or now
                self.plan(node, planned[2], max(retry_at, now))
                continue
            not_before = self._not_before.get(server, now)
            if not_before > now:
                self.plan(node, planned[2], not_before)
                continue
            not_after = None
            local = kind == "FetchResult" and node in self._results_in_hand
            if local:
                self._results_in_hand.discard(node)  # one fetch: a later one is a request
            elif kind in _BUDGETED and shared:
                slot = self._slot_of.pop((node, kind), None)
                if slot is None or now > slot + SLOT_VALID_S:
                    # No send slot yet (or it passed unused): queue for the next grant
                    # from the server's one budget (X3, shared by every worker).
                    self.stats["slots_missed"] += slot is not None
                    self.poll_queue.setdefault(server, collections.deque()).append(
                        (node, kind, planned[1])
                    )
                    continue
                if slot > now:
                    # Moved earlier since the slot was assigned (a push wake-up): it
                    # still leaves no sooner than its slot.
                    self._slot_of[(node, kind)] = slot
                    self.plan(node, planned[2], slot)
                    continue
                not_after = slot + SLOT_VALID_S
            elif kind == "Poll" and (node, kind) not in self._token_held:
                wait_s = self._take_poll_token(server, now)
                if wait_s > 0:
                    # The token is reserved for that slot: the request goes then (X3).
                    self._token_held.add((node, kind))
                    self.plan(node, planned[2], now + wait_s)
                    continue
            if kind == "Poll" and not shared:
                wait_s = self._admit_poll(server, now)
                if wait_s > 0:
                    self._token_held.add((node, kind))
                    self.plan(node, planned[2], now + wait_s)
                    continue
            self._token_held.discard((node, kind))
            del self._pending[(node, kind)]
            if kind == "Poll":
                self.last_poll_at[node] = now
                self.polls_by_server[server] += 1
            self._in_flight.add((node, kind))
            self.breakers[server] = breaker.on_request(now)
            self.stats["requests"] += 1
            actions.append(
                Action(
                    call_node_id=node,
                    server=server,
                    command=planned[2],
                    record=record,
                    not_after=not_after,
                )
            )
        return actions

    def slot_wants(self, now: float) -> Iterator[tuple[str, int]]:
        """The servers whose queued status reads need send slots now, and how many, one
        at a time: the caller takes each grant from the ledger and hands it to
        :meth:`assign_slots` before asking for the next. A grant is taken once the slots
        already assigned run out within the horizon."""
        for server, queue in self.poll_queue.items():
            while queue and not self._awaits_slot(*queue[0]):
                queue.popleft()
            # The same expression as next_wakeup's: at the moment it names, a grant is
            # taken (with ``>=`` on ``now + GRANT_HORIZON_S`` a driver on a virtual clock
            # woke at exactly that moment for nothing, for ever: found by the simulator).
            if not queue or self._granted_until.get(server, -math.inf) - GRANT_HORIZON_S > now:
                continue
            yield server, len(queue)

    def assign_slots(self, server: str, slots: Iterable[float]) -> None:
        """Give ``server``'s queued status reads the send slots granted, in order."""
        queue = self.poll_queue[server]
        for slot in slots:
            while queue and not self._awaits_slot(*queue[0]):
                queue.popleft()
            if not queue:
                self.stats["slots_unused"] += 1
                continue
            node, kind, _seq = queue.popleft()
            self._slot_of[(node, kind)] = slot
            self.plan(node, self._pending[(node, kind)][2], slot)
            self._granted_until[server] = slot

    def _awaits_slot(self, node: str, kind: str, seq: int) -> bool:
        """A queued read still stands (not re-planned, sent or dropped since)."""
        planned = self._pending.get((node, kind))
        return planned is not None and planned[1] == seq and (node, kind) not in self._slot_of

    def qps_max(self, server: str) -> float:
        """The poll cap of ``server``: its own where configured, else the default (X3)."""
        return self.server_qps_max.get(server, self.poll_qps_max)

    def _take_poll_token(self, server: str, now: float) -> float:
        bucket = self._buckets.get(server) or TokenBucket.full(
            self.qps_max(server), burst=self.poll_burst, now=now
        )
        self._buckets[server], wait_s = bucket.take(now)
        return wait_s

    def _admit_poll(self, server: str, now: float) -> float:
        """The strict per-window check at the moment a poll leaves (X3)."""
        window = self._windows.get(server)
        if window is None:
            qps = self.qps_max(server)
            if qps >= 1:
                window = WindowLimit(limit=int(qps), window_s=1.0)
            else:
                window = WindowLimit(limit=1, window_s=1.0 / qps)
        self._windows[server], wait_s = window.admit(now)
        return wait_s

    # --- what became of an action --------------------------------------------------------

    def busy_nodes(self) -> set[str]:
        """The call nodes with a request in flight."""
        return {node for node, _kind in self._in_flight}

    def held(self, action: Action, *, now: float, holds: bool) -> bool:
        """At the moment the driver would send ``action``: True when a Retry-After that
        arrived since it was issued holds its server past ``now``; the action must not
        leave, and (if this process still ``holds`` the operation) it is planned again
        for now, so that :meth:`due` holds it to the wait's end (X3, X9). Between
        ``due`` and the adapter call an event loop runs other replies: a poll issued an
        instant before a 429 arrived left after it (found by the simulator's worlds of
        workers, whose loop lags)."""
        if self._not_before.get(action.server, now) <= now:
            if action.kind == "Poll":
                # It leaves now, not when due() issued it: the interval counts from here.
                self.last_poll_at[action.call_node_id] = now
            return False
        key = (action.call_node_id, action.kind)
        self._in_flight.discard(key)
        self.stats["requests"] -= 1
        self.stats["held_by_retry_after"] += 1
        if action.kind == "Poll":
            self.polls_by_server[action.server] -= 1
        if holds and key not in self._pending:
            # The same command (never sent: a create here is not an unknown outcome);
            # due() holds it to the Retry-After's end, and a shared-budget read then
            # takes a new send slot.
            self.plan(action.call_node_id, action.command, now)
        self._rearm(key)
        return True

    def landed(self, action: Action) -> None:
        """``action`` is no longer in flight (what it leaves behind is planned next)."""
        self._in_flight.discard((action.call_node_id, action.kind))

    def rearm(self, action: Action) -> None:
        """Put a command of ``action``'s kind that fell due while it was in flight back
        on the timers."""
        self._rearm((action.call_node_id, action.kind))

    def requeue(self, action: Action, *, now: float, holds: bool) -> None:
        """``action`` was not carried out: plan it again (if this process still ``holds``
        the operation), unless something newer of its kind is planned."""
        key = (action.call_node_id, action.kind)
        self._in_flight.discard(key)
        if holds and key not in self._pending:
            self.plan(action.call_node_id, action.command, now)
        self._rearm(key)

    def replied(self, action: Action, event: events.Event, *, now: float) -> None:
        """``action``'s reply came: it is no longer in flight, and the server's health
        (breaker, Retry-After) learns from it."""
        key = (action.call_node_id, action.kind)
        self._in_flight.discard(key)
        self._rearm(key)
        self._note_server_health(action.server, event, now)
        if isinstance(event, events.RequestFailed):
            self.failures_by_server[action.server] += 1

    def end(self, action: Action) -> None:
        """``action`` ended with nothing to apply: it is no longer in flight."""
        key = (action.call_node_id, action.kind)
        self._in_flight.discard(key)
        self._rearm(key)

    def _rearm(self, key: _Key) -> None:
        if key in self._deferred:
            self._deferred.discard(key)
            planned = self._pending.get(key)
            if planned is not None:
                self.plan(key[0], planned[2], planned[0])

    def _note_server_health(self, server: str, event: events.Event, now: float) -> None:
        breaker = self.breakers.get(server, self._breaker_template)
        if isinstance(event, events.RequestFailed):
            self.breakers[server] = breaker.on_failure(now, event.failure)
            if event.retry_after_s:
                until = max(self._not_before.get(server, now), now + event.retry_after_s)
                self._not_before[server] = until
        elif not isinstance(event, (events.SubmitOutcomeLost, events.ResultFetchFailed)):
            self.breakers[server] = breaker.on_success()


__all__ = ["FORGET_LET_GO_POLL_S", "REQUEST_COMMANDS", "Action", "Scheduler"]
