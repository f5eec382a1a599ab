"""Several workers on one PostgreSQL ledger (SPEC D1, X3).

Each worker is a process of its own running the real engine with a lease (claims,
renewals, fenced writes, send slots from the ledger's shared poll budget) on a real
PostgreSQL ledger. The remote server is answered in the worker process by a scripted
task server (submit, ``working`` polls, then completed and the result), so the figures
measure the worker side — the ledger, the engine and their coordination — and not
one reference server process that every worker would queue behind on two cores.

1. **Lifecycles per second with 1, 2 and 4 workers**, poll cap far above the load:
   ``LONGCALL_BENCH_LIFECYCLES`` operations (default 1,200) created unowned, then the
   workers started together drive them to acceptance. Target: 2 workers ≥ 1.5 × one.
2. **100,000 open operations across 4 workers** (``LONGCALL_BENCH_OPEN``), seeded as
   acknowledged by the server (the steady state of open operations): each worker
   claims its share and keeps polling under a 20 QPS cap shared by all four for
   ``OPEN_WINDOW_S``. Reported: RSS added per held operation (target ≤ 5 KB), the
   worst one-second window of polls summed over the workers (≤ the cap), and the CPU
   seconds each worker spent.
"""

from __future__ import annotations

import multiprocessing
import os
import random
import secrets
import statistics
import time
from typing import Any

LIFECYCLES = int(os.environ.get("LONGCALL_BENCH_LIFECYCLES", "1200"))
OPEN_OPERATIONS = int(os.environ.get("LONGCALL_BENCH_OPEN", "100000"))
OPEN_WINDOW_S = 60.0
OPEN_QPS = 20.0
FAST_QPS = 100_000.0
POLLS_UNTIL_DONE = 2
POLL_INTERVAL_S = 0.05
LEASE_S = 30.0
DSN = os.environ.get("LONGCALL_PG_DSN", "postgresql://postgres@127.0.0.1:5432/test")


def _binding() -> Any:
    from longcall.adapters.base import ToolBinding

    return ToolBinding(
        server="bench://scripted",
        tool_name="report",
        protocol="bench",
        adapter_version="1",
        descriptor_digest="sha256:bench",
        task_support="required",
        idempotent=True,
        submission_lookup=True,
    )


def _answer(action: Any, polls: dict[str, int], forever: bool) -> Any:
    """A well-behaved task server, in the worker process."""
    from longcall.adapters.base import Outcome
    from longcall.core import ServerStatus
    from longcall.core import events as e
    from longcall.core.keys import digest_bytes
    from longcall.core.record import ResultKind

    node = action.call_node_id
    match action.kind:
        case "SendSubmit":
            return Outcome(
                event=e.SubmitAcknowledged(operation_id=f"op-{node}", poll_interval_s=0.05)
            )
        case "LookupSubmission":
            return Outcome(event=e.SubmissionNeverCreated())
        case "Poll":
            polls[node] = polls.get(node, 0) + 1
            if forever or polls[node] < POLLS_UNTIL_DONE:
                return Outcome(event=e.WorkingObserved())
            return Outcome(event=e.TerminalObserved(status=ServerStatus.COMPLETED))
        case "FetchResult":
            payload = b'{"rows":[1]}'
            return Outcome(
                event=e.ResultFetched(
                    status=ServerStatus.COMPLETED,
                    result_kind=ResultKind.VALUE,
                    result_digest=digest_bytes(payload),
                ),
                payload=payload,
            )
    raise AssertionError(action.kind)


def _rss_kb() -> int:
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") // 1024


def _worker(schema: str, qps: float, forever: bool, seconds: float, out: Any) -> None:
    """One worker process: drive the engine until nothing is open (or ``seconds``)."""
    from longcall.ledger.postgres import PostgresLedger
    from longcall.runtime.engine import Engine
    from longcall.runtime.leases import LeasePolicy

    ledger = PostgresLedger(DSN, schema=schema)
    engine = Engine(
        ledger,
        rng=random.Random(),
        owner=f"bench-{os.getpid()}-{secrets.token_hex(4)}",
        lease=LeasePolicy(lease_s=LEASE_S, renew_every_s=10.0, send_margin_s=5.0, claim_batch=2000),
        poll_qps_max=qps,
    )
    polls: dict[str, int] = {}
    sent: list[float] = []
    rss_before = _rss_kb()
    cpu_before = time.process_time()
    started = time.time()
    deadline = started + seconds
    held_max = 0
    while time.time() < deadline:
        now = time.time()
        engine.housekeep(now=now)
        actions = engine.due(now, limit=500)
        for action in actions:
            if action.kind == "Poll":
                sent.append(now)
            outcome = _answer(action, polls, forever)
            engine.apply_reply(action, outcome, now=time.time())
        held_max = max(held_max, len(engine.records))
        if not forever and engine.idle():
            break
        if not actions:
            wake = [w for w in (engine.next_wakeup(), engine.next_housekeeping()) if w]
            time.sleep(max(0.0, min([*wake, time.time() + 0.05]) - time.time()))
    out.put(
        {
            "rss_kb": _rss_kb() - rss_before,
            "held": held_max,
            "cpu_s": time.process_time() - cpu_before,
            "sent": sent,
            "wall_s": time.time() - started,
            "accepted": engine.stats["claimed"],
        }
    )
    engine.retire()
    ledger.close()


def _seed(schema: str, count: int, *, working: bool = False) -> None:
    """``count`` unowned operations, written in batches (the seeding is not measured):
    just created, or (``working``) already acknowledged by the server and polling —
    the steady state of open operations."""
    from longcall.core import events as e
    from longcall.core import handle, new_operation
    from longcall.core.keys import canonical_json, request_digest
    from longcall.ledger import codec
    from longcall.ledger.postgres import PostgresLedger

    binding = _binding()
    with PostgresLedger(DSN, schema=schema) as ledger:
        rows = []
        for i in range(count):
            record = new_operation(
                call_node_id=f"n{i:06d}",
                request_digest=request_digest("report", {"i": i}),
                tool_name="report",
                tool_descriptor_digest=binding.descriptor_digest,
                principal="bench",
                server=binding.server,
                protocol=binding.protocol,
                adapter_version=binding.adapter_version,
                now=time.time(),
                submission_lookup=True,
                tool_idempotent=True,
            ).record
            if working:
                ack = e.SubmitAcknowledged(operation_id=f"op-{i}", poll_interval_s=POLL_INTERVAL_S)
                record = handle(record, ack, now=record.created_at, jitter=0.5).record
            rows.append(
                (
                    record.call_node_id,
                    record.version,
                    record.state.value,
                    record.server,
                    record.submission_key,
                    codec.dumps(record),
                    canonical_json({"i": i}),
                )
            )
        conn = ledger._conn
        with conn.transaction(), conn.cursor() as cursor:
            cursor.executemany(
                "INSERT INTO operations (call_node_id, version, state, server, submission_key,"
                " record_json, created_at_utc, updated_at_utc, execution_epoch, open)"
                " VALUES (%s, %s, %s, %s, %s, %s, 'bench', 'bench', 0, 1)",
                [row[:6] for row in rows],
            )
            cursor.executemany(
                "INSERT INTO blobs (call_node_id, name, payload) VALUES (%s, 'request', %s)",
                [(row[0], row[6]) for row in rows],
            )


def _run_workers(
    schema: str, count: int, *, qps: float, forever: bool, seconds: float
) -> list[dict[str, Any]]:
    context = multiprocessing.get_context("spawn")
    out = context.Queue()
    processes = [
        context.Process(target=_worker, args=(schema, qps, forever, seconds, out))
        for _ in range(count)
    ]
    for process in processes:
        process.start()
    results = [out.get(timeout=seconds + 300) for _ in processes]
    for process in processes:
        process.join(timeout=60)
    return results


def _schema() -> Any:
    from tests.ledger.conftest import pg_schema

    return pg_schema()


def worst_window(times: list[float], window_s: float = 1.0) -> int:
    worst, first = 0, 0
    for last, t in enumerate(times):
        while times[first] <= t - window_s:
            first += 1
        worst = max(worst, last - first + 1)
    return worst


def lifecycles(workers: int) -> float:
    with _schema() as (_dsn, schema):
        _seed(schema, LIFECYCLES)
        results = _run_workers(schema, workers, qps=FAST_QPS, forever=False, seconds=600)
        return LIFECYCLES / max(r["wall_s"] for r in results)


def open_operations() -> None:
    with _schema() as (_dsn, schema):
        _seed(schema, OPEN_OPERATIONS, working=True)
        results = _run_workers(schema, 4, qps=OPEN_QPS, forever=True, seconds=OPEN_WINDOW_S)
    held = [r["held"] for r in results]
    per_op = [r["rss_kb"] * 1024 / max(1, r["held"]) for r in results]
    sent = sorted(t for r in results for t in r["sent"])
    print(
        f"{OPEN_OPERATIONS} open operations, 4 workers, {OPEN_WINDOW_S:.0f} s: held {held}; "
        f"RSS added per held operation {statistics.mean(per_op):.0f} B (max "
        f"{max(per_op):.0f} B; target <= 5120); polls {len(sent)}, worst 1 s window "
        f"{worst_window(sent)} (cap {OPEN_QPS:.0f}); CPU s per worker "
        f"{[round(r['cpu_s'], 1) for r in results]}"
    )


def run() -> None:
    rates = {n: lifecycles(n) for n in (1, 2, 4)}
    print(
        f"lifecycles/s on PostgreSQL ({LIFECYCLES} operations, scripted server): "
        + ", ".join(f"{n} worker{'s' * (n > 1)} {rate:.0f}" for n, rate in rates.items())
        + f"; 2 vs 1: {rates[2] / rates[1]:.2f}x (target >= 1.5), 4 vs 1: "
        f"{rates[4] / rates[1]:.2f}x  (cpu count {os.cpu_count()})"
    )
    open_operations()
