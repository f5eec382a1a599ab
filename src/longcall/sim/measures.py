"""The wire measures of the poll gates (SPEC X3, F3), as pure functions of what the
simulated servers saw and what their replies told each executor.

Each returns ``(findings, judged)``: the cases that break the rule and how many cases
it judged, so a gate that judged nothing says so instead of passing vacuously.

* :func:`poll_rate` — the most status reads of one executor at one server in any
  window ``[t, t + 1)`` (by their departure stamps).
* :func:`interval_findings` — two reads of one task by one executor closer than the
  interval the server had told that executor about it (X3 rule 1).
* :func:`jitter_findings` — a read exactly one told interval after the reply it was
  planned from: no jitter (X3 rule 2).
* :func:`retry_after_findings` — a request (any kind) to a server sooner after its
  429/503 than the ``Retry-After`` asked (X3, X9).

Must not: know the world, the engine or any wire format.
"""

from __future__ import annotations

import bisect
import dataclasses
import itertools
from collections import defaultdict
from collections.abc import Iterable, Mapping

EPSILON_S = 1e-6
EXACT_S = 1e-9

Read = tuple[int, float, str, str]
"""(executor, sent at, task id, call node): one status read a server received."""
Told = Mapping[tuple[int, str], list[tuple[float, float]]]
"""(executor, task id) -> [(delivered at, interval)], in delivery order."""


@dataclasses.dataclass(slots=True, kw_only=True)
class PollJudgement:
    """What the poll gates found and how many cases each judged: one world's, or a whole
    run's added up."""

    qps_max: int = 0
    reads: int = 0
    interval_violations: int = 0
    interval_judged: int = 0
    unjittered: int = 0
    jitter_judged: int = 0
    retry_after_violations: int = 0
    retry_after_judged: int = 0

    def add(self, other: PollJudgement) -> None:
        """Add ``other``'s counts (the rate: the higher of the two)."""
        for field in dataclasses.fields(self):
            mine, theirs = getattr(self, field.name), getattr(other, field.name)
            merged = max(mine, theirs) if field.name == "qps_max" else mine + theirs
            setattr(self, field.name, merged)


def max_per_second(times: list[float]) -> int:
    """The most events in any window [t, t + 1) of sorted times."""
    best = lo = 0
    for hi, t in enumerate(times):
        while times[lo] <= t - 1.0 + EPSILON_S:
            lo += 1
        best = max(best, hi - lo + 1)
    return best


def poll_rate(reads: Iterable[tuple[int, str, float]]) -> tuple[int, int]:
    """(the highest per-second count of one executor's reads at one server, reads)."""
    by_pair: dict[tuple[int, str], list[float]] = defaultdict(list)
    count = 0
    for client, server, sent in reads:
        by_pair[(client, server)].append(sent)
        count += 1
    best = max((max_per_second(sorted(times)) for times in by_pair.values()), default=0)
    return best, count


def _told_at(told: list[tuple[float, float]], t: float) -> float | None:
    """The interval in force at ``t``: the last one delivered at or before it."""
    index = bisect.bisect_right(told, (t, float("inf"))) - 1
    return told[index][1] if index >= 0 else None


def interval_findings(reads: Iterable[Read], told: Told) -> tuple[list[str], int]:
    """Reads sooner than the told interval after the same executor's previous read."""
    by_task: dict[tuple[int, str], list[float]] = defaultdict(list)
    for client, sent, task_id, _node in reads:
        by_task[(client, task_id)].append(sent)
    findings: list[str] = []
    judged = 0
    for key, times in by_task.items():
        times.sort()
        history = told.get(key, [])
        for before, after in itertools.pairwise(times):
            interval = _told_at(history, after)
            if interval is None:
                continue
            judged += 1
            if after - before < interval - EPSILON_S:
                findings.append(
                    f"e{key[0]} read {key[1]} {after - before:.3f} s after its previous read;"
                    f" the server asked for {interval:g} s"
                )
    return findings, judged


def jitter_findings(
    reads: Iterable[Read],
    told: Told,
    bases: Mapping[tuple[int, str], list[tuple[float, bool]]],
    limits: Mapping[str, float],
    *,
    jitter_fraction: float,
) -> tuple[list[str], int]:
    """Reads planned exactly one interval after their basis (the reply or answer the
    executor planned them from): the schedule carries no jitter (X3 rule 2).

    ``bases`` holds, per (executor, call node), when the executor applied something
    to the node and whether that was a plain answer (not one with a ``Retry-After``,
    which sets the delay itself); reads whose window would reach the node's wait
    budget or expiry (``limits``: the cap pulls them in) are not judged."""
    findings: list[str] = []
    judged = 0
    for client, sent, task_id, node in reads:
        history = bases.get((client, node), [])
        index = bisect.bisect_left(history, (sent, False)) - 1
        if index < 0:
            continue
        basis, plain = history[index]
        interval = _told_at(told.get((client, task_id), []), basis)
        if interval is None or not plain:
            continue
        if basis + interval * (1.0 + jitter_fraction) >= limits.get(node, float("inf")):
            continue
        judged += 1
        if abs((sent - basis) - interval) < EXACT_S:
            findings.append(
                f"e{client} read {task_id} exactly {interval:g} s (the interval) after the"
                " reply it was planned from: no jitter"
            )
    return findings, judged


def retry_after_findings(
    sent: Iterable[Read], retry_afters: Iterable[tuple[int, float, float]]
) -> tuple[list[str], int]:
    """Requests to one server that left an executor sooner after a 429/503 of that
    server reached it than its ``Retry-After`` asked: the wait holds every request of
    that executor to that server, whatever its kind and whichever operation's request
    met the 429/503 (X3, X9). ``sent`` holds (executor, departure, kind, node) of each
    action's request; the first to leave at or after each delivery is judged (one
    under way before it is not: it cannot be recalled)."""
    by_client: dict[int, list[tuple[float, str]]] = defaultdict(list)
    for client, at, kind, _node in sent:
        by_client[client].append((at, kind))
    for times in by_client.values():
        times.sort()
    findings: list[str] = []
    judged = 0
    for client, delivered, wait_s in retry_afters:
        times = by_client.get(client, [])
        # Inclusive: a request leaving in the very instant the 429/503 reached the
        # executor left after it (the world delivers before the executor's next step).
        index = bisect.bisect_left(times, (delivered, ""))
        if index >= len(times):
            continue
        judged += 1
        at, kind = times[index]
        if at < delivered + wait_s - EPSILON_S:
            findings.append(
                f"e{client} sent {kind} at {at:.3f}, {at - delivered:.3f} s"
                f" after a Retry-After of {wait_s:g} s"
            )
    return findings, judged


__all__ = [
    "EPSILON_S",
    "PollJudgement",
    "interval_findings",
    "jitter_findings",
    "max_per_second",
    "poll_rate",
    "retry_after_findings",
]
