"""Many permutations of the world, and the gate report over them (SPEC F3).

Permutation ``i`` of a run with seed ``S`` uses the seed :func:`derive_seed` makes
from ``(S, i)``, so any failure is replayed alone with ``longcall sim --replay SEED``.
Permutations are independent, so a run may be split over worker processes without
changing any result. This module aggregates and judges; it never prints (the CLI
renders the report).
"""

from __future__ import annotations

import dataclasses
import hashlib
import math
import os
import time
from collections.abc import Callable, Iterable
from concurrent.futures import ProcessPoolExecutor
from typing import Any

from longcall.sim.world import FAULT_CLASSES, POLL_QPS_LIMIT, Result, run_one

CANCEL_ACK_P99_LIMIT_S = 60.0
UNKNOWN_RECONCILE_LIMIT_S = 15 * 60.0
FAILURES_LISTED_MAX = 20


def derive_seed(run_seed: int, index: int) -> int:
    """The seed of permutation ``index`` of the run seeded ``run_seed``."""
    digest = hashlib.sha256(f"longcall-sim:{run_seed}:{index}".encode()).digest()
    return int.from_bytes(digest[:6], "big")


def replay_command(seed: int) -> str:
    return f"longcall sim --replay {seed}"


@dataclasses.dataclass(slots=True, kw_only=True)
class Report:
    """The gate values of one run (F3) plus what the run cost."""

    permutations: int
    seed: int
    terminal_divergence: int = 0
    duplicate_operations: int = 0
    receipts_per_node_max: int = 0
    poll_qps_max: float = 0.0
    poll_qps_limit: float = POLL_QPS_LIMIT
    poll_qps_max_all_executors: float = 0.0
    """Informational: racing executors together (they share no token bucket)."""
    poll_interval_violations: int = 0
    cancel_ack_p99_s: float = 0.0
    cancels: int = 0
    cancels_operator_resolved: int = 0
    """Cancels settled by the simulated operator (their latency includes its delay)."""
    cancel_ack_p99_s_without_operator: float = 0.0
    unknown_reconcile_max_s: float = 0.0
    unknowns: int = 0
    traceability: float = 1.0
    outbox_rows: int = 0
    outbox_traced: int = 0
    nodes: int = 0
    operator_resolutions: int = 0
    virtual_hours: float = 0.0
    fault_counts: dict[str, int] = dataclasses.field(
        default_factory=lambda: dict.fromkeys(FAULT_CLASSES, 0)
    )
    failures: list[dict[str, Any]] = dataclasses.field(default_factory=list)
    failed_permutations: int = 0
    elapsed_s: float = 0.0
    permutations_per_s: float = 0.0

    def gates(self) -> dict[str, bool]:
        """Every gate of F3 (and the per-step checks of F2) and whether it holds."""
        return {
            "terminal_divergence = 0": self.terminal_divergence == 0,
            "duplicate_operations = 0": self.duplicate_operations == 0,
            "receipts_per_node_max <= 1": self.receipts_per_node_max <= 1,
            f"poll_qps_max <= {self.poll_qps_limit:g}": self.poll_qps_max <= self.poll_qps_limit,
            "poll interval respected": self.poll_interval_violations == 0,
            f"cancel_ack_p99_s < {CANCEL_ACK_P99_LIMIT_S:g}": self.cancel_ack_p99_s
            < CANCEL_ACK_P99_LIMIT_S,
            f"unknown_reconcile_max_s <= {UNKNOWN_RECONCILE_LIMIT_S:g}": (
                self.unknown_reconcile_max_s <= UNKNOWN_RECONCILE_LIMIT_S
            ),
            "traceability = 100%": self.traceability == 1.0,
            "every safety/liveness check": self.failed_permutations == 0,
        }

    @property
    def ok(self) -> bool:
        return all(self.gates().values())

    def as_json(self) -> dict[str, Any]:
        data = dataclasses.asdict(self)
        data["gates"] = self.gates()
        data["ok"] = self.ok
        return data


def _p99(values: list[float]) -> float:
    if not values:
        return 0.0
    ordered = sorted(values)
    return ordered[max(0, math.ceil(0.99 * len(ordered)) - 1)]


def guarded(runner: Callable[[int], Result], seed: int) -> Result:
    """Run one permutation; an exception out of the simulated world is a failure of
    that permutation (with its seed), never the end of the whole run."""
    try:
        return runner(seed)
    except Exception as exc:  # reported with the seed that replays it
        return Result(
            seed=seed,
            violations=[f"the permutation raised {type(exc).__name__}: {exc}"],
            divergence=0,
            duplicates=0,
            receipts_max=0,
            poll_qps_max=0.0,
            poll_qps_max_all_executors=0.0,
            poll_interval_violations=0,
            cancel_latencies=[],
            cancel_latencies_operator=[],
            unknown_durations=[],
            outbox_rows=0,
            outbox_traced=0,
            faults={},
            operator_resolutions=0,
            nodes=0,
            virtual_s=0.0,
            trace=None,
        )


def _run_chunk(seeds: list[int]) -> list[Result]:
    return [guarded(run_one, seed) for seed in seeds]


def run(
    permutations: int,
    *,
    seed: int = 0,
    workers: int | None = None,
    on_progress: Callable[[int], None] | None = None,
    runner: Callable[[int], Result] | None = None,
) -> Report:
    """Run ``permutations`` permutations and judge them. ``runner`` replaces
    :func:`run_one` (tests plant bugs through it; it forces one process)."""
    started = time.perf_counter()
    seeds = [derive_seed(seed, i) for i in range(permutations)]
    report = Report(permutations=permutations, seed=seed)
    latencies: list[float] = []
    operator: list[float] = []
    results: Iterable[Result]
    if workers is None:
        workers = min(2, os.cpu_count() or 1) if permutations >= 500 else 1
    if runner is not None or workers <= 1:
        one = runner or run_one

        def serial() -> Iterable[Result]:
            for s in seeds:
                yield guarded(one, s)

        results = serial()
        for result in results:
            _add(report, result, latencies, operator)
            if on_progress is not None:
                on_progress(1)
    else:
        size = 100
        chunks = [seeds[i : i + size] for i in range(0, len(seeds), size)]
        with ProcessPoolExecutor(max_workers=workers) as pool:
            for batch in pool.map(_run_chunk, chunks):
                for result in batch:
                    _add(report, result, latencies, operator)
                if on_progress is not None:
                    on_progress(len(batch))
    report.cancel_ack_p99_s = round(_p99(latencies), 3)
    report.cancels = len(latencies)
    report.cancels_operator_resolved = len(operator)
    automatic = list(latencies)
    for value in operator:
        automatic.remove(value)
    report.cancel_ack_p99_s_without_operator = round(_p99(automatic), 3)
    if report.outbox_rows:
        report.traceability = report.outbox_traced / report.outbox_rows
    report.elapsed_s = round(time.perf_counter() - started, 3)
    report.permutations_per_s = round(permutations / max(report.elapsed_s, 1e-9), 1)
    report.virtual_hours = round(report.virtual_hours, 1)
    return report


def _add(report: Report, result: Result, latencies: list[float], operator: list[float]) -> None:
    report.terminal_divergence += result.divergence
    report.duplicate_operations += result.duplicates
    report.receipts_per_node_max = max(report.receipts_per_node_max, result.receipts_max)
    report.poll_qps_max = max(report.poll_qps_max, result.poll_qps_max)
    report.poll_qps_max_all_executors = max(
        report.poll_qps_max_all_executors, result.poll_qps_max_all_executors
    )
    report.poll_interval_violations += result.poll_interval_violations
    latencies.extend(result.cancel_latencies)
    operator.extend(result.cancel_latencies_operator)
    if result.unknown_durations:
        report.unknowns += len(result.unknown_durations)
        longest = round(max(result.unknown_durations), 3)
        report.unknown_reconcile_max_s = max(report.unknown_reconcile_max_s, longest)
    report.outbox_rows += result.outbox_rows
    report.outbox_traced += result.outbox_traced
    report.nodes += result.nodes
    report.operator_resolutions += result.operator_resolutions
    report.virtual_hours += result.virtual_s / 3600.0
    for name, count in result.faults.items():
        report.fault_counts[name] = report.fault_counts.get(name, 0) + count
    if result.violations:
        report.failed_permutations += 1
        if len(report.failures) < FAILURES_LISTED_MAX and result.seed is not None:
            report.failures.append(
                {
                    "seed": result.seed,
                    "replay": replay_command(result.seed),
                    "violations": result.violations[:5],
                }
            )
