"""What one seed expands into: a world's servers, calls, faults and people (SPEC F1).

Owns :class:`Profile` — the fault mix as a parameter (how often each fault is on, and
how hard; how slow the operator is), with the named profiles ``gentle``, ``default``
and ``harsh`` — and :class:`Config`, one world drawn from a profile by the world's one
``random.Random`` (printed first by ``--replay``). Every gate must hold on every
profile (F3).

Must not: draw from any other generator, or know how a world runs.
"""

from __future__ import annotations

import dataclasses
import random

from longcall.sim.server import AIP151, APIFY, LEGACY, MODERN
from longcall.sim.truth import OUTCOMES, Plan, Rates, ServerFaults

Mix = tuple[float, tuple[float, ...]]
"""(share of worlds with the fault on, the rates it is drawn from when on)."""


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class Profile:
    """A fault mix: which faults a world draws, how often and how hard (F1)."""

    name: str
    request_loss: Mix
    response_loss: Mix
    reorder: Mix
    truncate: Mix
    stale_callback: Mix
    cancel_ack_loss: Mix
    create_response_loss: Mix
    id_reuse: Mix
    not_found_early: Mix
    rate_limited: Mix
    unavailable: Mix
    input_replay: Mix
    cancel_completion_tie: Mix
    refused_unread: Mix
    crossed_reply: Mix
    crash_share: float
    race_share: float
    crash_on_action_share: float
    workers_share: float
    """The share of worlds run by 2–4 lease-mode workers on one ledger (D1) instead of
    one single-process executor."""
    worker_fault_share: float
    """In such a world, the chance of each worker fault class (paused, lease expired,
    killed, retired) being on, and of the workers' clocks being skewed."""
    operator_delay_s: tuple[float, float]
    """How long after a record entered reconciliation the operator acts on it."""
    operator_tick_s: float
    """How often the operator looks at the reconciliation queue."""
    latency_s: tuple[tuple[float, float], tuple[float, float]]
    """The ranges the lower and upper bound of one hop's latency are drawn from."""
    cancel_ack_p99_limit_s: float = 60.0
    """The cancel gate's limit on the p99 of the cancels the product settles itself
    (F3). Harsh worlds lose too many requests for 60 s: see ``HARSH``."""


DEFAULT = Profile(
    name="default",
    request_loss=(0.4, (0.01, 0.03, 0.08)),
    response_loss=(0.4, (0.01, 0.03, 0.08)),
    reorder=(0.3, (0.05, 0.2)),
    truncate=(0.2, (0.1, 0.3)),
    stale_callback=(0.5, (0.5, 1.0)),
    cancel_ack_loss=(0.3, (0.3, 0.6)),
    create_response_loss=(0.3, (0.2, 0.5)),
    id_reuse=(0.05, (0.3, 1.0)),
    not_found_early=(0.05, (0.01, 0.03)),
    rate_limited=(0.25, (0.05, 0.15)),
    unavailable=(0.25, (0.05, 0.15)),
    input_replay=(0.3, (0.2, 0.5)),
    cancel_completion_tie=(0.3, (0.5, 1.0)),
    refused_unread=(0.2, (0.02, 0.05)),
    crossed_reply=(0.05, (0.01, 0.03)),
    crash_share=0.3,
    race_share=0.15,
    crash_on_action_share=0.15,
    workers_share=0.12,
    worker_fault_share=0.4,
    operator_delay_s=(10.0, 45.0),
    operator_tick_s=10.0,
    latency_s=((0.005, 0.05), (0.05, 0.5)),
)
GENTLE = dataclasses.replace(
    DEFAULT,
    name="gentle",
    request_loss=(0.2, (0.005, 0.01)),
    response_loss=(0.2, (0.005, 0.01)),
    reorder=(0.1, (0.05,)),
    truncate=(0.1, (0.05,)),
    cancel_ack_loss=(0.1, (0.1,)),
    create_response_loss=(0.1, (0.1,)),
    id_reuse=(0.02, (0.3,)),
    not_found_early=(0.02, (0.01,)),
    rate_limited=(0.1, (0.02,)),
    unavailable=(0.1, (0.02,)),
    refused_unread=(0.05, (0.01,)),
    crossed_reply=(0.02, (0.01,)),
    crash_share=0.1,
    race_share=0.05,
    crash_on_action_share=0.05,
    workers_share=0.08,
    worker_fault_share=0.25,
    operator_delay_s=(5.0, 20.0),
    operator_tick_s=5.0,
)
HARSH = dataclasses.replace(
    DEFAULT,
    name="harsh",
    request_loss=(0.6, (0.05, 0.1, 0.15)),
    response_loss=(0.6, (0.05, 0.1, 0.15)),
    reorder=(0.5, (0.1, 0.3)),
    truncate=(0.4, (0.2, 0.4)),
    stale_callback=(0.7, (0.5, 1.0)),
    cancel_ack_loss=(0.5, (0.4, 0.7)),
    create_response_loss=(0.5, (0.3, 0.6)),
    id_reuse=(0.1, (0.3, 1.0)),
    not_found_early=(0.1, (0.02, 0.05)),
    rate_limited=(0.4, (0.1, 0.25)),
    unavailable=(0.4, (0.1, 0.25)),
    input_replay=(0.5, (0.3, 0.6)),
    cancel_completion_tie=(0.5, (0.5, 1.0)),
    refused_unread=(0.2, (0.02, 0.05)),
    crossed_reply=(0.1, (0.02, 0.05)),
    crash_share=0.5,
    race_share=0.3,
    crash_on_action_share=0.3,
    workers_share=0.15,
    worker_fault_share=0.6,
    operator_delay_s=(30.0, 120.0),
    operator_tick_s=30.0,
    latency_s=((0.01, 0.1), (0.1, 1.0)),
    # Half of these worlds lose 40-70 % of cancel acks, and each lost request or
    # response costs the driver's 15 s request timeout before the retry: at 70 %, one
    # cancel in four needs five sends (0.7 ** 4), over 60 s of timeouts before any ack,
    # then polls that lose up to 15 % each way. No client can confirm those within 60 s.
    cancel_ack_p99_limit_s=120.0,
)
PROFILES: dict[str, Profile] = {p.name: p for p in (GENTLE, DEFAULT, HARSH)}

PROTOCOL_SHARES = ((0.15, AIP151), (0.30, APIFY))
"""A world is AIP-151 below 0.15 of its draw, Apify-style below 0.30, else MCP (70 %)."""


@dataclasses.dataclass(slots=True, kw_only=True)
class NetFaults(Rates):
    """Per-message probabilities of the network's faults (F1); zero once healed."""

    request_loss: float = 0.0
    response_loss: float = 0.0
    reorder: float = 0.0
    truncate: float = 0.0
    stale_callback: float = 0.0
    cancel_ack_loss: float = 0.0
    create_response_loss: float = 0.0


@dataclasses.dataclass(slots=True, kw_only=True)
class ServerConfig:
    name: str
    protocol: str
    lookup: bool
    idempotent: bool
    poll_interval_s: float
    ttl_s: float
    input_interval_s: float | None = None
    """MCP: the interval told once a task has asked for input (None: unchanged)."""
    streams: bool = False
    """MCP: the server answers calls and results as event streams."""
    graceful: bool = False
    """Apify: the executor is configured to abort gracefully there (ABORTING first)."""


SKEW_MAX_S = 0.04
"""The most a worker's clock is off the world's, either way (docs/design/simulator.md
says why: two workers disagree by at most 0.08 s, less than what the shared poll
budget's spacing leaves over at the departure stamps)."""
ROLLBACK_TO = "0"
"""The adapter version a world's rollback goes back to (the sim's bindings write "1")."""
LEASES_S = (6.0, 9.0, 15.0)
"""The lease lengths a multi-worker world draws (``LeasePolicy.of``; short, so that
takeovers happen within a world's few minutes)."""


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class Workers:
    """A world of several lease-mode workers on one ledger (D1), and their faults."""

    count: int
    lease_s: float
    skews: tuple[float, ...]
    """Per worker: its clock minus the world's (seconds)."""
    pauses: tuple[tuple[int, float, float], ...] = ()
    """(worker, at, for how long): the process stops (SIGSTOP, a long GC) — nothing of
    it runs, its replies wait — for longer than its lease."""
    stalls: tuple[tuple[int, float, float], ...] = ()
    """(worker, at, for how long): its lease renewal stops while the rest of it runs,
    so its lease expires under it."""
    kills: tuple[tuple[int, float, float | None], ...] = ()
    """(worker, at, replacement after): killed holding its leases (no retire); a new
    process with a new owner id starts that much later (None: none)."""
    retires: tuple[tuple[int, float], ...] = ()
    """(worker, at): a clean stop (SIGTERM): in-flight work requeued, leases released."""
    send_lag_s: float = 0.0
    """The most an action waits between ``Engine.due`` and its adapter call (the event
    loop's lag): a read that misses its send slot goes back through ``slot_missed``."""
    rollback: tuple[int, float] | None = None
    """(server, at): an operator rolls the protocol of that server back (R3,
    ``runtime.rollout.rollback``) from the version its operations are bound to to
    :data:`ROLLBACK_TO`, while operations are in flight (None: no rollback)."""


@dataclasses.dataclass(slots=True, kw_only=True)
class Config:
    """Everything a seed expands into (printed first by ``--replay``)."""

    profile: str
    servers: list[ServerConfig]
    nodes: list[tuple[str, str, float]]
    """(call node id, server name, start time)."""
    cancels: list[tuple[str, float]]
    crashes: list[float]
    race_at: float | None
    crash_on_action: int | None
    """Crash between a committed decision and its request: at the n-th action sent."""
    file_ledger: bool
    net: NetFaults
    server_faults: ServerFaults
    latency_s: tuple[float, float]
    operator_delay_s: float
    operator_tick_s: float
    plans: dict[str, Plan]
    budgets: dict[str, float]
    """Call nodes with a total wait budget (X3); the others wait as long as it takes."""
    repeat_cancel: bool
    """The caller asks to cancel a second time (a new cancel generation, X5)."""
    human_gate: bool
    """Input is answered by a person through ``Engine.answer`` after a while (X4),
    not by a policy hook at once."""
    double_answer: float
    """The share of a person's answers sent twice (a double submit), 1–20 s apart."""
    workers: Workers | None = None
    """Several lease-mode workers (None: one single-process executor, as before)."""

    @classmethod
    def draw(cls, rng: random.Random, profile: Profile = DEFAULT) -> Config:
        servers = [_server(rng, i) for i in range(rng.choice((1, 1, 2)))]
        nodes = []
        plans: dict[str, Plan] = {}
        budgets: dict[str, float] = {}
        for i in range(rng.randint(1, 4)):
            node = f"n{i}"
            nodes.append((node, rng.choice(servers).name, round(rng.uniform(0.0, 60.0), 3)))
            plans[node] = _plan(rng)
            if rng.random() < 0.1:
                budgets[node] = round(rng.uniform(20.0, 120.0), 3)
        cancels = [
            (n, round(start + rng.uniform(0.0, 60.0), 3))
            for n, _, start in nodes
            if rng.random() < 0.3
        ]
        crashes = (
            sorted(round(rng.uniform(0.0, 600.0), 3) for _ in range(rng.randint(1, 3)))
            if rng.random() < profile.crash_share
            else []
        )
        race_at = round(rng.uniform(0.0, 300.0), 3) if rng.random() < profile.race_share else None
        crash_on_action = (
            rng.randint(1, 40) if rng.random() < profile.crash_on_action_share else None
        )

        def pick(mix: Mix) -> float:
            share, values = mix
            return rng.choice(values) if rng.random() < share else 0.0

        p = profile
        net = NetFaults(
            request_loss=pick(p.request_loss),
            response_loss=pick(p.response_loss),
            reorder=pick(p.reorder),
            truncate=pick(p.truncate),
            stale_callback=pick(p.stale_callback),
            cancel_ack_loss=pick(p.cancel_ack_loss),
            create_response_loss=pick(p.create_response_loss),
        )
        faults = ServerFaults(
            id_reuse=pick(p.id_reuse),
            not_found_early=pick(p.not_found_early),
            rate_limited=pick(p.rate_limited),
            unavailable=pick(p.unavailable),
            input_replay=pick(p.input_replay),
            cancel_completion_tie=pick(p.cancel_completion_tie),
            refused_unread=pick(p.refused_unread),
            crossed_reply=pick(p.crossed_reply),
        )
        (lo_lo, lo_hi), (hi_lo, hi_hi) = p.latency_s
        latency = (round(rng.uniform(lo_lo, lo_hi), 4), round(rng.uniform(hi_lo, hi_hi), 4))
        operator_delay = round(rng.uniform(*p.operator_delay_s), 3)
        repeat_cancel = rng.random() < 0.3
        human_gate = rng.random() < 0.3
        double_answer = rng.choice((0.0, 0.3)) if human_gate else 0.0
        file_ledger = bool(crashes) and rng.random() < 0.05
        # SPEC P3, P4: the world's protocol, drawn last so the MCP draws above keep
        # their shape; a world is all MCP, all AIP-151 or all Apify-style.
        family = rng.random()
        protocol = next((proto for share, proto in PROTOCOL_SHARES if family < share), None)
        if protocol is not None:
            for server in servers:
                server.protocol = protocol
                server.input_interval_s = None
                server.streams = False
                server.graceful = protocol == APIFY and rng.random() < 0.5
            for node, plan in plans.items():
                plans[node] = dataclasses.replace(plan, input_offsets_s=())  # no input there
            faults.refused_unread = faults.crossed_reply = 0.0
            if protocol == APIFY:
                faults.page_loss = pick((0.4, (0.1, 0.3)))
                faults.page_contradict = pick((0.2, (0.05, 0.2)))
                faults.zero_items = pick((0.4, (0.3, 1.0)))
        # D1: drawn last of all (from a separate draw of the same generator), so the
        # worlds of one executor keep the shape they had before workers existed.
        workers = _workers(rng, profile, crash_on_action, len(servers))
        if workers is not None:
            # Several workers replace the single-process faults: a whole-process crash
            # of every worker, and a racing stale executor, become kills and pauses of
            # one worker; a crash before a send kills the worker that was sending.
            crashes, race_at = [], None
            file_ledger = False
        return cls(
            profile=profile.name,
            servers=servers,
            nodes=nodes,
            cancels=cancels,
            crashes=crashes,
            race_at=race_at,
            crash_on_action=crash_on_action,
            file_ledger=file_ledger,
            net=net,
            server_faults=faults,
            latency_s=latency,
            operator_delay_s=operator_delay,
            operator_tick_s=p.operator_tick_s,
            plans=plans,
            budgets=budgets,
            repeat_cancel=repeat_cancel,
            human_gate=human_gate,
            double_answer=double_answer,
            workers=workers,
        )


def _workers(
    rng: random.Random, profile: Profile, crash_on_action: int | None, servers: int
) -> Workers | None:
    draw = rng.random()
    if draw >= profile.workers_share:
        return None
    # R3: the rollback comes from this draw (uniform below the share), not from a draw
    # of its own, so every world keeps the draws it made before rollbacks existed.
    within = draw / profile.workers_share
    rollback: tuple[int, float] | None = None
    if within < profile.worker_fault_share:
        moment = within / profile.worker_fault_share
        # Within the minute the calls start in, so that operations are in flight.
        rollback = (int(moment * 1e6) % servers, round(10.0 + 60.0 * moment, 3))
    count = rng.randint(2, 4)
    lease_s = rng.choice(LEASES_S)
    share = profile.worker_fault_share

    def on() -> bool:
        return rng.random() < share

    skews = (
        tuple(round(rng.uniform(-SKEW_MAX_S, SKEW_MAX_S), 4) for _ in range(count))
        if on()
        else (0.0,) * count
    )
    # Each fault befalls one worker; pauses and stalls last beyond the lease (plus two
    # claim rounds), so that the others take its work over before it comes back.
    pauses = (
        ((rng.randrange(count), round(rng.uniform(5.0, 120.0), 3), _away(rng, lease_s)),)
        if on()
        else ()
    )
    stalls = (
        ((rng.randrange(count), round(rng.uniform(5.0, 120.0), 3), _away(rng, lease_s)),)
        if on()
        else ()
    )
    kills = (
        (
            (
                rng.randrange(count),
                round(rng.uniform(5.0, 120.0), 3),
                round(rng.uniform(1.0, 30.0), 3) if rng.random() < 0.5 else None,
            ),
        )
        if on()
        else ()
    )
    retires = ((rng.randrange(count), round(rng.uniform(5.0, 120.0), 3)),) if on() else ()
    send_lag_s = rng.choice((0.0, 0.05, 0.3))
    del crash_on_action  # kept by the config: the sending worker is killed there
    return Workers(
        count=count,
        lease_s=lease_s,
        skews=skews,
        pauses=pauses,
        stalls=stalls,
        kills=kills,
        retires=retires,
        send_lag_s=send_lag_s,
        rollback=rollback,
    )


def _away(rng: random.Random, lease_s: float) -> float:
    return round(lease_s + rng.uniform(2.5, lease_s), 3)


def _server(rng: random.Random, index: int) -> ServerConfig:
    short_ttl = rng.random() < 0.15
    interval = round(rng.uniform(1.0, 6.0), 3)
    input_interval = round(interval * rng.uniform(1.5, 3.0), 3) if rng.random() < 0.4 else None
    return ServerConfig(
        name=f"s{index}",
        protocol=rng.choice((MODERN, LEGACY)),
        lookup=rng.random() < 0.5,
        idempotent=rng.random() < 0.5,
        poll_interval_s=interval,
        ttl_s=round(rng.uniform(30.0, 120.0) if short_ttl else 3600.0, 3),
        input_interval_s=input_interval,
        streams=rng.random() < 0.3,
    )


def _plan(rng: random.Random) -> Plan:
    duration = round(rng.uniform(1.0, 60.0), 3)
    draw = rng.random()
    outcome = OUTCOMES[0] if draw < 0.8 else OUTCOMES[1] if draw < 0.9 else OUTCOMES[2]
    offsets: tuple[float, ...] = ()
    if rng.random() < 0.25:
        rounds = 1 if rng.random() < 0.7 else 2
        offsets = tuple(sorted(round(rng.uniform(0.0, duration), 3) for _ in range(rounds)))
    return Plan(duration_s=duration, outcome=outcome, input_offsets_s=offsets)


__all__ = [
    "DEFAULT",
    "GENTLE",
    "HARSH",
    "PROFILES",
    "ROLLBACK_TO",
    "SKEW_MAX_S",
    "Config",
    "NetFaults",
    "Profile",
    "ServerConfig",
    "Workers",
]
