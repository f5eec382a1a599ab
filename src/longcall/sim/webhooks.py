"""Webhook deliveries as a push channel of a simulated world (SPEC S7, X3, F1).

Owns :class:`WebhookChannel`: each simulated server signs one delivery per status
change of each of its tasks with the real signing code
(:func:`longcall.adapters.webhooks.sign`, a ``v1`` HMAC or a ``v1a`` ed25519 key per
server), and the network brings it to the caller's real receiver
(:class:`~longcall.runtime.webhooks.WebhookReceiver`, its real
:class:`~longcall.adapters.webhooks.Verifier`, on the receiving process's clock), whose
only power is :meth:`Engine.hint <longcall.runtime.engine.Engine.hint>`: wake the named
operation's poll. Faults come from a generator of the channel's own, seeded from the
world's seed: forged deliveries (another key, a tampered body, a tampered id),
duplicates (a replay, a resend), delays (some past the tolerance window), reordering
and drops. Also owns :func:`run_webhooks`, which runs one seed with the channel and
without it, and judges the channel's gates (:class:`WebhookStats`): the accepted
terminals equal the poll-only run's, every forgery is refused, no delivery moves an
operation.

Must not: draw from the world's generator, change a simulated task (its status is read
from a copy), or call the engine other than through the receiver — a world with a
channel that delivers nothing is the poll-only world, draw for draw.
"""

from __future__ import annotations

import concurrent.futures
import copy
import dataclasses
import functools
import json
import random
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from longcall.adapters.webhooks import (
    DEFAULT_TOLERANCE_S,
    ID_HEADER,
    SigningKey,
    Verifier,
    VerifyKey,
    ed25519_key_from_seed,
    new_hmac_key,
    sign,
)
from longcall.core import State
from longcall.runtime.webhooks import WebhookReceiver
from longcall.sim.checks import Violation
from longcall.sim.config import DEFAULT, Profile
from longcall.sim.server import SimServer
from longcall.sim.truth import CANCELLED, COMPLETED, FAILED, TERMINAL, Task
from longcall.sim.world import Result, World

if TYPE_CHECKING:
    from longcall.runtime.engine import Engine

CHANNEL = "webhook"
"""The kind of the channel's events on the world's queue (``World._on_channel``)."""
TOLERANCE_S = DEFAULT_TOLERANCE_S
"""The receiver's window: the library's default, five minutes either side."""
FORGERIES = ("wrong_key", "tampered_body", "tampered_id")
RATES = (0.0, 0.05, 0.2, 0.5)
"""What each fault rate of a world is drawn from (per delivery)."""


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class WebhookFaults:
    """Per-delivery probabilities of the channel's faults in one world."""

    dropped: float
    duplicated: float
    delayed: float
    late: float
    """Delayed past the receiver's tolerance window (refused as stale)."""
    reordered: float
    forged: float
    """A forgery sent beside the genuine delivery."""

    @classmethod
    def draw(cls, rng: random.Random) -> WebhookFaults:
        return cls(**{f.name: rng.choice(RATES) for f in dataclasses.fields(cls)})


@dataclasses.dataclass(slots=True, kw_only=True)
class WebhookStats:
    """What the channel did in one world (or, added up, in a run)."""

    sent: int = 0
    """Genuine deliveries the servers signed (one per status change)."""
    dropped: int = 0
    duplicates: int = 0
    """Second copies sent (a replay of the same bytes, or a resend re-signed)."""
    duplicates_ignored: int = 0
    """Deliveries answered 200 as an id already taken, hinting nothing."""
    late: int = 0
    """Deliveries delayed past the tolerance window."""
    late_refused: int = 0
    reordered: int = 0
    """Deliveries that arrived after a newer change of their task had."""
    forged: int = 0
    """Forgeries sent (some arrive after the world has ended)."""
    forged_refused: int = 0
    forged_accepted: int = 0
    unreceived: int = 0
    """Deliveries that found no running process (a crash, every worker away)."""
    verified: int = 0
    """Deliveries the receiver took as a hint (2xx)."""
    woken: int = 0
    """Wake-ups those hints gave (``Engine.wake`` on an open operation: its planned
    poll comes sooner unless it already is, never under the server's interval)."""
    moved: int = 0
    """Deliveries during which a record was written (must be 0)."""
    nodes_compared: int = 0
    """Call nodes whose server truth is the same with and without webhooks."""
    truth_moved: int = 0
    """Call nodes whose server truth differs between the two runs (not compared)."""
    terminals_differ: int = 0
    """Call nodes whose accepted outcome differs from the poll-only run's (must be 0)."""

    def add(self, other: WebhookStats) -> None:
        for field in dataclasses.fields(self):
            setattr(self, field.name, getattr(self, field.name) + getattr(other, field.name))


@dataclasses.dataclass(slots=True, kw_only=True)
class WebhookResult(Result):
    """A permutation run with the webhook channel, and what the channel did."""

    webhooks: WebhookStats = dataclasses.field(default_factory=WebhookStats)


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class Delivery:
    """One POST on its way: the server it claims, its headers and bytes."""

    server: str
    task_key: int
    """The task whose change it reports (``id`` of the simulated task)."""
    version: int
    """The change's number within its task (1: the first status)."""
    headers: Mapping[str, str]
    body: bytes
    forged: str | None = None
    copy: bool = False
    late: bool = False


class EngineHints:
    """What the receiver asks of "the executor" in a world: the receiving process's
    clock, and :meth:`Engine.hint` answered at once (the world runs one thread)."""

    def __init__(self, world: World, eid: int) -> None:
        self.world = world
        self.eid = eid
        self.clock: Callable[[], float] = functools.partial(world.clock, eid)

    def hint(self, **named: str | None) -> concurrent.futures.Future[list[str]]:
        """``named``: the operation id, call node, status and server the delivery names."""

        def hinted(engine: Engine) -> list[str]:
            return engine.hint(now=self.clock(), **named)

        future: concurrent.futures.Future[list[str]] = concurrent.futures.Future()
        future.set_result(self.world._call(self.eid, hinted) or [])
        return future


def _server_key(rng: random.Random) -> tuple[SigningKey, VerifyKey]:
    """A server's signing key and what its receiver holds (a ``v1a`` receiver holds
    only the public half)."""
    if rng.random() < 0.5:
        key = new_hmac_key(rng.randbytes(32))
        return key, key
    private = ed25519_key_from_seed(rng.randbytes(32))
    return private, private.public_key()


class WebhookChannel:
    """The deliveries of one world: signed at each status change, faulted on the way,
    verified and hinted by the receiving process's real receiver."""

    def __init__(self, world: World, rng: random.Random) -> None:
        self.world = world
        self.rng = rng
        self.faults = WebhookFaults.draw(rng)
        self.stats = WebhookStats()
        self.keys = {name: _server_key(rng) for name in world.servers}
        self.attacker = {name: _server_key(rng)[0] for name in world.servers}
        """A key of the same version that is not the server's (a forger's)."""
        self.seen: dict[int, tuple[str, int]] = {}
        """task -> (the status last signed for, the number of changes signed)."""
        self.arrived: dict[int, int] = {}
        """task -> the newest change of it that reached a receiver."""
        self.receivers: dict[int, WebhookReceiver] = {}
        """Per executor process: its receiver (a restarted process starts a new one)."""
        self.scan_at: float | None = None
        for server in world.servers.values():
            self._watch(server)

    # --- the servers' side -------------------------------------------------------------

    def _watch(self, server: SimServer) -> None:
        """After each request a server serves, sign the changes it made (a create, a
        cancel, an answer). The wire front is the server's own; only its instance
        attribute is wrapped."""
        serve: Callable[..., Any] = server.serve  # type: ignore[attr-defined]

        def served(*args: Any, **kwargs: Any) -> Any:
            answer = serve(*args, **kwargs)
            self.scan()
            return answer

        server.serve = served  # type: ignore[attr-defined]

    def on_event(self, what: str, *args: Any) -> None:
        getattr(self, "_on_" + what)(*args)

    def _on_scan(self, at: float) -> None:
        if self.scan_at == at:
            self.scan_at = None
        self.scan()

    def scan(self) -> None:
        """Sign a delivery for every task whose status changed since it was last
        signed for, and plan the scan at the next change the truth foresees."""
        now = self.world.now
        upcoming = float("inf")
        for name, server in self.world.servers.items():
            for task in server.tasks:
                status, next_change = _status_at(task, now)
                upcoming = min(upcoming, next_change)
                last, version = self.seen.get(id(task), (None, 0))
                if status != last:
                    self.seen[id(task)] = (status, version + 1)
                    self._send(name, task, status, version + 1)
        if upcoming != float("inf") and (self.scan_at is None or upcoming < self.scan_at):
            self.scan_at = upcoming
            self.world.at(upcoming, "channel", "scan", upcoming, essential=False)

    def _send(self, server: str, task: Task, status: str, version: int) -> None:
        self.stats.sent += 1
        body = _payload(task, status, self.world.now)
        event_id = f"evt_{task.task_id}_{version}"
        key = self.keys[server][0]
        headers = sign([key], msg_id=event_id, timestamp=int(self.world.now), body=body)
        genuine = Delivery(
            server=server, task_key=id(task), version=version, headers=headers, body=body
        )
        faults = self.faults
        if self.rng.random() < faults.forged:
            self._forge(genuine, task)
        if self.rng.random() < faults.dropped:
            self.stats.dropped += 1
            self.world.log(CHANNEL, f"{server} {event_id} {status} dropped")
            return
        self._travel(genuine)
        if self.rng.random() < faults.duplicated:
            self.stats.duplicates += 1
            later = self.rng.uniform(0.5, 120.0)
            if self.rng.random() < 0.5:
                # The sender's retry: the same id, signed afresh when it is sent again.
                resent = sign([key], msg_id=event_id, timestamp=int(self.world.now + later),
                              body=body)  # fmt: skip
                twin = dataclasses.replace(genuine, headers=resent, copy=True)
            else:
                twin = dataclasses.replace(genuine, copy=True)  # a replay of the same bytes
            self._travel(twin, extra=later)

    def _forge(self, genuine: Delivery, task: Task) -> None:
        """A delivery that claims the task ended, not signed by the server's key."""
        kind = self.rng.choice(FORGERIES)
        claimed = json.loads(genuine.body)["data"]["status"]
        claim = self.rng.choice([s for s in (COMPLETED, FAILED, CANCELLED) if s != claimed])
        body = _payload(task, claim, self.world.now)
        headers = dict(genuine.headers)
        if kind == "wrong_key":
            attacker = self.attacker[genuine.server]
            headers = sign([attacker], msg_id=headers[ID_HEADER], timestamp=int(self.world.now),
                           body=body)  # fmt: skip
        elif kind == "tampered_id":
            # The genuine signature over the genuine bytes, under another id: a replay
            # that tries to pass dedup.
            body = genuine.body
            headers[ID_HEADER] = headers[ID_HEADER] + "x"
        self.stats.forged += 1
        self._travel(dataclasses.replace(genuine, headers=headers, body=body, forged=kind))

    def _travel(self, delivery: Delivery, *, extra: float = 0.0) -> None:
        lo, hi = self.world.config.latency_s
        delay = extra + self.rng.uniform(lo, hi)
        faults = self.faults
        if self.rng.random() < faults.late:
            delivery = dataclasses.replace(delivery, late=True)
            delay += self.rng.uniform(TOLERANCE_S + 1.0, 2 * TOLERANCE_S)
        elif self.rng.random() < faults.delayed:
            delay += self.rng.uniform(1.0, 120.0)
        if self.rng.random() < faults.reordered:
            delay += self.rng.uniform(1.0, 15.0)  # newer changes may overtake it
        self.world.at(self.world.now + delay, "channel", "arrive", delivery, essential=False)

    # --- the caller's side -------------------------------------------------------------

    def _receiver(self, eid: int) -> WebhookReceiver:
        receiver = self.receivers.get(eid)
        if receiver is None:
            hints = EngineHints(self.world, eid)
            servers = {
                name: (name, Verifier([verify], tolerance_s=TOLERANCE_S))
                for name, (_sign, verify) in self.keys.items()
            }
            receiver = WebhookReceiver(hints, None, clock=hints.clock, servers=servers)
            self.receivers[eid] = receiver
        return receiver

    def _on_arrive(self, delivery: Delivery) -> None:
        world = self.world
        running = [eid for eid in world.engines if eid not in world.paused]
        if not running:
            self.stats.unreceived += 1
            return
        # One URL in front of every worker: a load balancer picks one.
        eid = running[0] if len(running) == 1 else self.rng.choice(running)
        stats = self.stats
        newest = self.arrived.get(delivery.task_key, 0)
        if delivery.forged is None and delivery.version < newest:
            stats.reordered += 1
        writes = world.checker.writes
        answer = self._receiver(eid).answer(delivery.headers, delivery.body, delivery.server)
        if world.checker.writes != writes:
            stats.moved += 1
            world.checker.fail("webhook moved an operation", f"{delivery.headers[ID_HEADER]}")
        accepted = 200 <= answer.status < 300
        woken = answer.woken.result() if answer.woken is not None else []
        world.log(CHANNEL, f"e{eid} {delivery.headers[ID_HEADER]} {answer.status} woke {woken}")
        if delivery.forged is not None:
            if accepted:
                stats.forged_accepted += 1
                world.checker.fail(
                    "forged webhook refused",
                    f"a forgery ({delivery.forged}) of {delivery.headers[ID_HEADER]} was "
                    f"answered {answer.status}",
                )
            else:
                stats.forged_refused += 1
            return
        stats.late += delivery.late
        if not accepted:
            stats.late_refused += delivery.late
            return
        if answer.woken is None:
            stats.duplicates_ignored += 1  # verified, an id already taken: 200, no hint
            return
        self.arrived[delivery.task_key] = max(newest, delivery.version)
        stats.verified += 1
        stats.woken += len(woken)


def _status_at(task: Task, now: float) -> tuple[str, float]:
    """The task's status at ``now`` and its next foreseen change, read from a copy:
    the truth is advanced only by the server's own paths."""
    if task.status in TERMINAL:
        return task.status, float("inf")
    view = copy.copy(task)
    view.advance(now)
    return view.status, view.next_change(now)


def _payload(task: Task, status: str, now: float) -> bytes:
    """A status change as the tool side's webhook event: the MCP task status shape
    under ``data``; never a result (``longcall.server.webhooks.model.payload``)."""
    data = {"taskId": task.task_id, "status": status, "lastUpdatedAt": round(now, 3)}
    return json.dumps({"type": "task.status", "data": data}, sort_keys=True).encode()


# --- one seed, with the channel and without -------------------------------------------


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class Terminal:
    """What one call node accepted, as the ledger last wrote it."""

    state: str
    kind: str | None
    digest: str | None
    """The result's digest (None for a cancel: its body is whatever read or ack
    confirmed it, time stamps included; that it was cancelled is the outcome, as the
    divergence gate judges it too)."""
    by_operator: bool

    def same(self, other: Terminal) -> bool:
        """The same outcome, whoever settled it: the state, the result kind and the
        digest (an operator's result is classified as the engine's fetch classifies
        one, so an operator and the engine give the same bytes the same kind)."""
        return (self.state, self.kind, self.digest) == (other.state, other.kind, other.digest)


Accepted = dict[str, Terminal]
Truths = dict[str, tuple[str, str] | None]
"""call node -> the server's truth for its request at the end (status, result digest)."""


def accepted_terminals(world: World) -> Accepted:
    """What each call node of a finished world accepted, as the ledger last wrote it."""
    accepted: Accepted = {}
    for node, record in world.checker.last.items():
        if record.state not in (State.ACCEPTED, State.CANCELLED_ACCEPTED):
            continue
        cancelled = record.state is State.CANCELLED_ACCEPTED
        accepted[node] = Terminal(
            state=record.state.value,
            kind=record.result_kind.value if record.result_kind is not None else None,
            digest=None if cancelled else record.result_digest,
            by_operator=record.resolved_by is not None,
        )
    return accepted


def truths(world: World) -> Truths:
    """The servers' truth for each call node's request once the world has ended."""
    found: Truths = {}
    for node, server_name, _start in world.config.nodes:
        server = world.servers[server_name]
        request = world.request_of.get(node)
        task = server.truth(request, world.now) if request is not None else None
        if task is None or task.status not in TERMINAL:
            found[node] = None
        else:
            found[node] = (task.status, server.truth_digest(task))
    return found


def channel_rng(seed: int) -> random.Random:
    """The channel's own generator: the world's draws stay the world's."""
    return random.Random(f"longcall-sim-webhooks:{seed}")


def run_webhooks(seed: int, *, trace: bool = False, profile: Profile = DEFAULT) -> WebhookResult:
    """Run the permutation of ``seed`` with webhook deliveries, and judge them against
    the same seed's poll-only run."""
    baseline = World(random.Random(seed), seed=seed, profile=profile)
    baseline.run()
    expected, expected_truths = accepted_terminals(baseline), truths(baseline)
    channels: list[WebhookChannel] = []

    def attach(world: World) -> WebhookChannel:
        channels.append(WebhookChannel(world, channel_rng(seed)))
        return channels[0]

    world = World(random.Random(seed), seed=seed, trace=trace, profile=profile, channel=attach)
    result = world.run()
    stats = channels[0].stats
    got, got_truths = accepted_terminals(world), truths(world)
    for node, _server, _start in world.config.nodes:
        if got_truths[node] != expected_truths[node]:
            # The poll's timing moved the server's own truth (a cancel that reached it
            # before the work ended in one run and after in the other, a task numbered
            # differently): each run is judged against its own truth (divergence).
            stats.truth_moved += 1
            continue
        stats.nodes_compared += 1
        before, after = expected.get(node), got.get(node)
        if before is None or after is None:
            differ = before is not after
        else:
            differ = not before.same(after)
        if differ:
            stats.terminals_differ += 1
            result.violations.append(
                _violation(
                    f"{node} accepted {got.get(node)} with webhooks, "
                    f"{expected.get(node)} polling only"
                )
            )
    fields = {f.name: getattr(result, f.name) for f in dataclasses.fields(Result)}
    return WebhookResult(**fields, webhooks=stats)


def _violation(detail: str) -> Violation:
    return Violation(check="accepted terminals as polling only", detail=detail)


__all__ = [
    "FORGERIES",
    "TOLERANCE_S",
    "EngineHints",
    "Terminal",
    "WebhookChannel",
    "WebhookFaults",
    "WebhookResult",
    "WebhookStats",
    "accepted_terminals",
    "channel_rng",
    "run_webhooks",
]
