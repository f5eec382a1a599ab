"""Many permutations of the world, and the gate report over them (SPEC F3).

Permutation ``i`` of a run with seed ``S`` uses the seed :func:`derive_seed` makes
from ``(S, i)``, so any failure is replayed alone with ``longcall sim --replay SEED``.
Permutations are independent, so a run may be split over worker processes without
changing any result.

Every gate says what it judged (receipts compared with the truth, reads measured on
the wire, cancels timed…) and a gate that judged nothing fails: a measurement that
stopped being recorded never reads as a pass. The structural guarantees — one receipt
per node (a UNIQUE constraint), every outbox row traced to a receipt (a foreign key) —
cannot fail while the schema stands; they are re-read and reported apart, as such.

This module aggregates and judges; it never prints (the console renders the report).
"""

from __future__ import annotations

import dataclasses
import hashlib
import math
import os
import time
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ProcessPoolExecutor
from typing import Any, TypeVar

from longcall.sim.checks import Violation
from longcall.sim.config import DEFAULT, PROFILES, Profile
from longcall.sim.measures import PollJudgement
from longcall.sim.webhooks import WebhookResult, WebhookStats, run_webhooks
from longcall.sim.world import (
    CLAIMS_SLACK,
    FAULT_CLASSES,
    POLL_QPS_LIMIT,
    WORKER_STATS,
    Result,
    run_one,
)

UNKNOWN_RECONCILE_LIMIT_S = 15 * 60.0
FAILURES_LISTED_MAX = 20
CHUNK = 100
"""Permutations per task handed to a worker process."""


def derive_seed(run_seed: int, index: int) -> int:
    """The seed of permutation ``index`` of the run seeded ``run_seed``."""
    digest = hashlib.sha256(f"longcall-sim:{run_seed}:{index}".encode()).digest()
    return int.from_bytes(digest[:6], "big")


def replay_command(seed: int, profile: str = DEFAULT.name, *, webhooks: bool = False) -> str:
    suffix = "" if profile == DEFAULT.name else f" --profile {profile}"
    if webhooks:
        suffix += " --webhooks"
    return f"longcall sim --replay {seed}{suffix}"


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class Gate:
    """One gate: its value, how many cases it judged, and whether it holds."""

    name: str
    value: str
    judged: int
    judged_what: str
    met: bool
    """The value meets the gate (before asking whether anything was judged)."""

    @property
    def holds(self) -> bool:
        return self.met and self.judged > 0


@dataclasses.dataclass(slots=True, kw_only=True)
class Report:
    """The gate values of one run (F3) plus what the run cost."""

    permutations: int
    seed: int
    profile: str = DEFAULT.name
    terminal_divergence: int = 0
    receipts_compared: int = 0
    duplicate_operations: int = 0
    requests: int = 0
    poll_qps_limit: float = POLL_QPS_LIMIT
    polls: PollJudgement = dataclasses.field(default_factory=PollJudgement)
    cancel_ack_p99_s: float = 0.0
    cancels: int = 0
    cancels_operator_resolved: int = 0
    """Cancels settled by the simulated operator (their latency includes its delay)."""
    cancel_ack_p99_s_without_operator: float = 0.0
    cancel_ack_p99_limit_s: float = DEFAULT.cancel_ack_p99_limit_s
    """The profile's limit (the run sets it from the profile it ran)."""
    unknown_reconcile_max_s: float = 0.0
    unknowns: int = 0
    receipts_per_node_max: int = 0
    receipts: int = 0
    outbox_rows: int = 0
    outbox_traced: int = 0
    nodes: int = 0
    operator_resolutions: int = 0
    claims_judged: int = 0
    claims_over: int = 0
    claims_max: int = 0
    multi_worker_worlds: int = 0
    """Worlds run by several lease-mode workers on one ledger (D1)."""
    workers_started: int = 0
    worker_stats: dict[str, int] = dataclasses.field(
        default_factory=lambda: dict.fromkeys(WORKER_STATS, 0)
    )
    """Added up over those worlds: ``Engine.stats`` (claims, takeovers, writes
    refused as fenced, lease lapses, send slots missed, releases)."""
    stale_sends: int = 0
    """Requests a worker sent for an operation the ledger no longer gave it."""
    virtual_hours: float = 0.0
    fault_counts: dict[str, int] = dataclasses.field(
        default_factory=lambda: dict.fromkeys(FAULT_CLASSES, 0)
    )
    checks_failed: dict[str, int] = dataclasses.field(default_factory=dict)
    """check or gate name -> permutations in which it found something."""
    failures: list[dict[str, Any]] = dataclasses.field(default_factory=list)
    failed_permutations: int = 0
    elapsed_s: float = 0.0
    permutations_per_s: float = 0.0
    webhooks: WebhookStats | None = None
    """Added up over the permutations when each ran with webhook deliveries (and its
    poll-only twin); None: polling only."""

    @property
    def traceability(self) -> float:
        return self.outbox_traced / self.outbox_rows if self.outbox_rows else 1.0

    def gate_list(self) -> list[Gate]:
        """Every gate of F3 (and the per-step checks of F2), each with what it judged."""
        polls = self.polls
        return [
            divergence_gate(self.terminal_divergence, self.receipts_compared),
            Gate(
                name="duplicate operations = 0",
                value=str(self.duplicate_operations),
                judged=self.requests,
                judged_what="business requests the servers saw",
                met=self.duplicate_operations == 0,
            ),
            Gate(
                name=f"poll QPS <= {self.poll_qps_limit:g}",
                value=f"{polls.qps_max} / s per executor and server",
                judged=polls.reads,
                judged_what="status reads measured at the servers",
                met=polls.qps_max <= self.poll_qps_limit,
            ),
            Gate(
                name="poll interval respected",
                value=f"{polls.interval_violations} violations",
                judged=polls.interval_judged,
                judged_what="consecutive reads after a told interval",
                met=polls.interval_violations == 0,
            ),
            Gate(
                name="poll delays jittered",
                value=f"{polls.unjittered} delays of exactly the interval",
                judged=polls.jitter_judged,
                judged_what="reads planned from a reply with an interval",
                met=polls.unjittered == 0,
            ),
            Gate(
                name="Retry-After honoured",
                value=f"{polls.retry_after_violations} requests too soon",
                judged=polls.retry_after_judged,
                judged_what="requests after a 429/503 with Retry-After",
                met=polls.retry_after_violations == 0,
            ),
            Gate(
                # An operator-settled cancel waits for the simulated operator (a profile
                # parameter, up to minutes in harsh worlds), not for the product: shown
                # beside, not judged.
                name=f"cancel ack p99 < {self.cancel_ack_p99_limit_s:g} s",
                value=(
                    f"{self.cancel_ack_p99_s_without_operator:.1f} s"
                    f" ({self.cancel_ack_p99_s:.1f} s with the"
                    f" {self.cancels_operator_resolved} an operator settled)"
                ),
                judged=self.cancels - self.cancels_operator_resolved,
                judged_what="cancels the product settled, timed",
                met=self.cancel_ack_p99_s_without_operator < self.cancel_ack_p99_limit_s,
            ),
            Gate(
                name=f"UNKNOWN reconciled <= {UNKNOWN_RECONCILE_LIMIT_S / 60:g} min",
                value=f"{self.unknown_reconcile_max_s:.1f} s at most",
                judged=self.unknowns,
                judged_what="UNKNOWN stretches timed",
                met=self.unknown_reconcile_max_s <= UNKNOWN_RECONCILE_LIMIT_S,
            ),
            Gate(
                name=f"claims per operation <= {CLAIMS_SLACK} + faults",
                value=(
                    f"{self.claims_over} operations over (most claims of one: {self.claims_max})"
                ),
                judged=self.claims_judged,
                judged_what="operations (claims counted in the ledger)",
                met=self.claims_over == 0,
            ),
            checks_gate(self.failed_permutations, self.permutations),
            *(webhook_gates(self.webhooks) if self.webhooks is not None else []),
        ]

    def structural(self) -> list[Gate]:
        """Guarantees the schema enforces, re-read (they cannot fail while it stands)."""
        return [
            Gate(
                name="one receipt per node (UNIQUE)",
                value=f"{self.receipts_per_node_max} at most",
                judged=self.receipts,
                judged_what="receipts",
                met=self.receipts_per_node_max <= 1,
            ),
            Gate(
                name="outbox rows traced to receipts (FOREIGN KEY)",
                value=f"{self.traceability:.2%}",
                judged=self.outbox_rows,
                judged_what="outbox rows",
                met=self.outbox_traced == self.outbox_rows,
            ),
        ]

    def gates(self) -> dict[str, bool]:
        """Gate name -> holds (a gate that judged nothing does not hold)."""
        return {gate.name: gate.holds for gate in self.gate_list()}

    @property
    def ok(self) -> bool:
        structural = all(g.met for g in self.structural())
        return all(self.gates().values()) and structural

    def as_json(self) -> dict[str, Any]:
        data = dataclasses.asdict(self)
        data["traceability"] = self.traceability
        data["gates"] = gates_json(self.gate_list())
        data["structural"] = {
            g.name: {"value": g.value, "judged": g.judged, "holds": g.met}
            for g in self.structural()
        }
        data["ok"] = self.ok
        return data


def divergence_gate(divergence: int, compared: int) -> Gate:
    """Receipts against the servers' truth (F3)."""
    return Gate(
        name="terminal divergence = 0",
        value=str(divergence),
        judged=compared,
        judged_what="receipts compared with the server's truth",
        met=divergence == 0,
    )


def checks_gate(failed: int, permutations: int) -> Gate:
    """Every check of every permutation (F2)."""
    return Gate(
        name="every safety/liveness check",
        value=f"{failed} failed permutations",
        judged=permutations,
        judged_what="permutations",
        met=failed == 0,
    )


def gates_json(gates: list[Gate]) -> dict[str, Any]:
    return {
        g.name: {"value": g.value, "judged": g.judged, "judged_what": g.judged_what,
                 "holds": g.holds}
        for g in gates
    }  # fmt: skip


def note_failure(
    checks_failed: dict[str, int],
    failures: list[dict[str, Any]],
    seed: int | None,
    violations: list[Violation],
    replay: str,
) -> None:
    """Count a failed permutation's checks, and list it (up to ``FAILURES_LISTED_MAX``)."""
    for check in {v.check for v in violations}:
        checks_failed[check] = checks_failed.get(check, 0) + 1
    if len(failures) < FAILURES_LISTED_MAX and seed is not None:
        failures.append(
            {"seed": seed, "replay": replay, "violations": [str(v) for v in violations[:5]]}
        )


def webhook_gates(stats: WebhookStats) -> list[Gate]:
    """The webhook channel's gates (S7): a delivery is a hint, never the truth."""
    forged_arrived = stats.forged_refused + stats.forged_accepted
    return [
        Gate(
            name="accepted terminals = polling only",
            value=(
                f"{stats.terminals_differ} call nodes differ"
                f" ({stats.truth_moved} not compared: the server's truth itself moved)"
            ),
            judged=stats.nodes_compared,
            judged_what="call nodes with the same truth in both runs",
            met=stats.terminals_differ == 0,
        ),
        Gate(
            name="forged webhooks refused",
            value=f"{stats.forged_accepted} taken",
            judged=forged_arrived,
            judged_what="forgeries received",
            met=stats.forged_accepted == 0,
        ),
        Gate(
            name="no webhook moves an operation",
            value=f"{stats.moved} deliveries wrote a record",
            judged=stats.verified + stats.duplicates_ignored,
            judged_what="verified deliveries",
            met=stats.moved == 0,
        ),
    ]


def p99(values: list[float]) -> float:
    if not values:
        return 0.0
    ordered = sorted(values)
    return ordered[max(0, math.ceil(0.99 * len(ordered)) - 1)]


Runner = Callable[[int], Result]
R = TypeVar("R")


def guarded_as(runner: Callable[[int], R], seed: int, crashed: Callable[[int, str], R]) -> R:
    """Run one permutation; an exception out of the simulated world is a failure of
    that permutation (``crashed(seed, detail)``), never the end of the whole run."""
    try:
        return runner(seed)
    except Exception as exc:  # reported with the seed that replays it
        return crashed(seed, f"the permutation raised {type(exc).__name__}: {exc}")


def guarded(runner: Runner, seed: int) -> Result:
    """:func:`guarded_as` for the simulator's worlds."""
    return guarded_as(runner, seed, _raised)


def _raised(seed: int, detail: str) -> Result:
    return Result(seed=seed, violations=[Violation(check="world raised", detail=detail)])


def _run_chunk(job: tuple[list[int], str]) -> list[Result]:
    seeds, profile = job
    chosen = PROFILES[profile]
    return [guarded(lambda s: run_one(s, profile=chosen), seed) for seed in seeds]


def _run_webhook_chunk(job: tuple[list[int], str]) -> list[Result]:
    seeds, profile = job
    chosen = PROFILES[profile]
    return [guarded(lambda s: run_webhooks(s, profile=chosen), seed) for seed in seeds]


def results(
    seeds: list[int], *, profile: Profile = DEFAULT, workers: int = 1, webhooks: bool = False
) -> Iterator[list[Result]]:
    """The results of ``seeds``, in order, in batches (over ``workers`` processes);
    ``webhooks``: each with webhook deliveries, judged against its poll-only run."""
    chunk = _run_webhook_chunk if webhooks else _run_chunk
    return batches(chunk, seeds, profile=profile, workers=workers)


def batches(
    chunk: Callable[[tuple[list[int], str]], list[R]],
    seeds: list[int],
    *,
    profile: Profile,
    workers: int,
) -> Iterator[list[R]]:
    """``chunk`` over ``seeds`` in batches of ``CHUNK``, in order (over ``workers``
    processes; ``chunk`` is then a module-level function, so that it pickles)."""
    jobs = [(seeds[i : i + CHUNK], profile.name) for i in range(0, len(seeds), CHUNK)]
    if workers <= 1:
        yield from map(chunk, jobs)
        return
    with ProcessPoolExecutor(max_workers=workers) as pool:
        yield from pool.map(chunk, jobs)


def run(
    permutations: int,
    *,
    seed: int = 0,
    profile: Profile = DEFAULT,
    workers: int | None = None,
    on_progress: Callable[[int], None] | None = None,
    runner: Runner | None = None,
    webhooks: bool = False,
) -> Report:
    """Run ``permutations`` permutations and judge them. ``runner`` replaces
    :func:`run_one` (it forces one process); ``webhooks``: each permutation also gets
    webhook deliveries (:func:`~longcall.sim.webhooks.run_webhooks`)."""
    if permutations <= 0:
        raise ValueError(f"permutations must be a positive number, not {permutations}")
    started = time.perf_counter()
    seeds = [derive_seed(seed, i) for i in range(permutations)]
    report = Report(
        permutations=permutations,
        seed=seed,
        profile=profile.name,
        cancel_ack_p99_limit_s=profile.cancel_ack_p99_limit_s,
        webhooks=WebhookStats() if webhooks else None,
    )
    latencies: list[float] = []
    operator: list[float] = []
    if workers is None:
        workers = min(2, os.cpu_count() or 1) if permutations >= 500 else 1
    batches: Iterable[list[Result]]
    if runner is not None:
        batches = ([guarded(runner, s)] for s in seeds)
    else:
        batches = results(seeds, profile=profile, workers=workers, webhooks=webhooks)
    for batch in batches:
        for result in batch:
            _add(report, result, latencies, operator)
        if on_progress is not None:
            on_progress(len(batch))
    report.cancel_ack_p99_s = round(p99(latencies), 3)
    report.cancels = len(latencies)
    report.cancels_operator_resolved = len(operator)
    automatic = list(latencies)
    for value in operator:
        automatic.remove(value)
    report.cancel_ack_p99_s_without_operator = round(p99(automatic), 3)
    report.elapsed_s = round(time.perf_counter() - started, 3)
    report.permutations_per_s = round(permutations / max(report.elapsed_s, 1e-9), 1)
    report.virtual_hours = round(report.virtual_hours, 1)
    return report


def _add(report: Report, result: Result, latencies: list[float], operator: list[float]) -> None:
    report.terminal_divergence += result.divergence
    report.receipts_compared += result.receipts_compared
    report.duplicate_operations += result.duplicates
    report.requests += result.requests
    report.polls.add(result.polls)
    latencies.extend(result.cancel_latencies)
    operator.extend(result.cancel_latencies_operator)
    if result.unknown_durations:
        report.unknowns += len(result.unknown_durations)
        longest = round(max(result.unknown_durations), 3)
        report.unknown_reconcile_max_s = max(report.unknown_reconcile_max_s, longest)
    report.receipts_per_node_max = max(report.receipts_per_node_max, result.receipts_max)
    report.receipts += result.receipts
    report.outbox_rows += result.outbox_rows
    report.outbox_traced += result.outbox_traced
    report.nodes += result.nodes
    report.operator_resolutions += result.operator_resolutions
    report.claims_judged += result.claims_judged
    report.claims_over += result.claims_over
    report.claims_max = max(report.claims_max, result.claims_max)
    if result.workers > 1:
        report.multi_worker_worlds += 1
        report.workers_started += result.workers
        report.stale_sends += result.stale_sends
        for name, count in result.worker_stats.items():
            report.worker_stats[name] = report.worker_stats.get(name, 0) + count
    report.virtual_hours += result.virtual_s / 3600.0
    for name, count in result.faults.items():
        report.fault_counts[name] = report.fault_counts.get(name, 0) + count
    if isinstance(result, WebhookResult) and report.webhooks is not None:
        report.webhooks.add(result.webhooks)
    if result.violations:
        report.failed_permutations += 1
        replay = replay_command(
            result.seed or 0, report.profile, webhooks=report.webhooks is not None
        )
        note_failure(report.checks_failed, report.failures, result.seed, result.violations, replay)
