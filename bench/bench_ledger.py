"""Ledger throughput: full lifecycles accepted per second, against raw ``sqlite3`` writing
the same rows, in the same process (L4).

A lifecycle is the "completed through an input round" walkthrough: create, then seven
events through the real machine, the last one ``accept_terminal`` (receipt, result,
outbox). The figures:

- **ours**: the walkthrough through the ledger API (the machine's decisions included),
  driven from the record just created, as the engine holds it, on the scripted
  server's answers made before the clock starts (the server's work is not the
  ledger's; the raw writer's rows are made beforehand too);
- **ledger only**: the same records, decided beforehand, written through the ledger API;
- **raw**: plain ``sqlite3`` writing exactly the ledger's rows — every column of every
  version of the operations row, the history rows, the receipt, result and outbox rows,
  read back from a planning run of the ledger itself, each lifecycle's names and stamps
  put in — into the same schema (the ledger's own migrations: tables, indexes, foreign
  keys) in the same eight transactions. Before any figure, three lifecycles written
  both ways are compared row by row: a raw writer that writes other rows stops the
  benchmark;
- **minimal raw**: the first baseline, eight commits into a bare schema without history
  rows or indexes (printed for reference).

``synchronous=full`` and ``normal``: alternating rounds of a few lifecycles, each into a
new file. ``synchronous=normal`` is then swept: both files grow to 100,000 lifecycles
(``LONGCALL_BENCH_LEDGER_LIFECYCLES``) in alternating chunks, and the cost per lifecycle
and ours/raw are printed at 1k, 10k and 100k. Target: ours / raw >= 0.7 at
``synchronous=normal`` at every size, and a flat cost per lifecycle.
"""

from __future__ import annotations

import dataclasses
import datetime
import functools
import itertools
import os
import sqlite3
import statistics
import tempfile
import time
from collections.abc import Callable, Iterable
from pathlib import Path

from longcall.core.keys import derive_submission_key
from longcall.core.record import evolve
from longcall.ledger import SQLiteLedger
from longcall.testing import scripted as walkthrough

LIFECYCLES = 60
ROUNDS = 5
TARGET = 0.7
"""Ours / raw lifecycles per second at synchronous=normal."""
STAMP = "2026-01-01T00:00:00.000000+00:00"
SWEEP_MAX = int(os.environ.get("LONGCALL_BENCH_LEDGER_LIFECYCLES", "100000"))
SWEEP_CHUNK = 1000
SWEEP_AT = (1_000, 10_000, 100_000)


def server_answers(nodes: Iterable[str]) -> list[tuple[str, list[walkthrough.Answer]]]:
    """Each node with the scripted server's answers to it, made before the clock starts."""
    return [(node, walkthrough.answers(node, walkthrough.COMPLETED, now=0.0)) for node in nodes]


def ours_lifecycles(
    ledger: SQLiteLedger, scripts: list[tuple[str, list[walkthrough.Answer]]]
) -> None:
    """Each node's walkthrough through the ledger API and the machine, as the engine
    drives it: from the record just created, on the server's answers made beforehand."""
    for node, script in scripts:
        created = walkthrough.start(ledger, node, walkthrough.COMPLETED, now=0.0)
        walkthrough.drive(
            ledger, node, walkthrough.COMPLETED, now=0.0, record=created, script=script
        )


def ours_per_s(path: Path, synchronous: str, count: int) -> float:
    scripts = server_answers(f"bench-{i}" for i in range(count))
    with SQLiteLedger(path, synchronous=synchronous) as ledger:
        started = time.perf_counter()
        ours_lifecycles(ledger, scripts)
        elapsed = time.perf_counter() - started
    return count / elapsed


def ledger_only_per_s(path: Path, synchronous: str, count: int) -> float:
    """The walkthrough's writes through the ledger API, with the machine's work done."""
    from longcall.core import handle
    from longcall.core.commands import AcceptTerminal

    with SQLiteLedger(path.with_suffix(".plan.db"), synchronous="off") as planner:
        plan: list[tuple[object, ...]] = []
        record = walkthrough.start(planner, "x", walkthrough.COMPLETED, now=0.0)
        first = record
        while True:
            step = walkthrough.next_event(record, walkthrough.COMPLETED)
            if step is None:
                break
            event, payload = step
            transition = handle(record, event, now=record.next_poll_at or 0.0, jitter=0.5)
            accepts = [c for c in transition.commands if isinstance(c, AcceptTerminal)]
            plan.append((record.version, transition.record, event.name, accepts, payload))
            record = transition.record
    with SQLiteLedger(path, synchronous=synchronous) as ledger:
        started = time.perf_counter()
        for i in range(count):
            node = f"bench-{i}"
            key = f"{first.submission_key}-{i}"
            ledger.create(evolve(first, call_node_id=node, submission_key=key))
            for version, after, event, accepts, payload in plan:
                after = evolve(after, call_node_id=node, submission_key=key)  # type: ignore[arg-type]
                if accepts:
                    receipt = dataclasses.replace(accepts[0].receipt, call_node_id=node)  # type: ignore[attr-defined]
                    ledger.accept_terminal(
                        after,
                        receipt,
                        expected_version=version,  # type: ignore[arg-type]
                        result_payload=payload,  # type: ignore[arg-type]
                        event=event,  # type: ignore[arg-type]
                    )
                else:
                    ledger.update(after, expected_version=version, event=event)  # type: ignore[arg-type]
        elapsed = time.perf_counter() - started
    return count / elapsed


PLAN_NODE = "lc-plan"
"""The call node of the planning run, replaced by each lifecycle's own in the raw rows."""
_CONST, _TEXT, _STAMP = 0, 1, 2
"""How the raw writer makes one value of a planned row: as planned, with the node's
names put in (a text naming the planning node or its submission key), or the stamp of
the transaction (a ``…_utc`` column)."""

Template = list[tuple[object, int]]


@dataclasses.dataclass(frozen=True, slots=True)
class RawPlan:
    """The rows one lifecycle writes, read back from the ledger's own planning run, and
    the eight transactions the raw writer writes them in (no Python of the ledger's)."""

    key: str
    """The planning node's submission key (each lifecycle's own is put in its place)."""
    insert: tuple[str, Template]
    updates: list[tuple[str, Template]]
    """Per later version: the UPDATE of the columns that changed (and the stamp)."""
    history: list[Template]
    receipt: Template
    result: Template
    outbox_created: Template
    record_json: str
    """The record as created (the minimal baseline writes it at every step)."""


def _template(values: tuple[object, ...], key: str) -> Template:
    def kind(value: object) -> int:
        if value == STAMP:
            return _STAMP
        if isinstance(value, str) and (PLAN_NODE in value or key in value):
            return _TEXT
        return _CONST

    return [(value, kind(value)) for value in values]


def _fill(template: Template, node: str, key: str, plan_key: str, stamp: str) -> list[object]:
    return [
        stamp if how == _STAMP
        else value.replace(PLAN_NODE, node).replace(plan_key, key)  # type: ignore[attr-defined]
        if how == _TEXT else value
        for value, how in template
    ]  # fmt: skip


def plan_raw(path: Path) -> RawPlan:
    """Run one lifecycle through the ledger (fixed stamps) and keep every row it wrote,
    version by version, as the raw writer's templates."""
    steps: list[tuple[object, ...]] = []
    with SQLiteLedger(path, synchronous="off", utc_now=lambda: STAMP) as ledger:
        read = functools.partial(ledger._read, "SELECT * FROM operations WHERE call_node_id = ?")
        names = [d[0] for d in ledger._conn.execute("SELECT * FROM operations").description]
        walkthrough.start(ledger, PLAN_NODE, walkthrough.COMPLETED, now=0.0)
        steps.append(read((PLAN_NODE,))[0])
        walkthrough.drive(
            ledger, PLAN_NODE, walkthrough.COMPLETED, now=0.0,
            on_step=lambda _record: steps.append(read((PLAN_NODE,))[0]),
        )  # fmt: skip
        history = ledger._read(f"SELECT {HISTORY_COLUMNS} FROM history ORDER BY version")
        (receipt,) = ledger._read(f"SELECT {RECEIPT_COLUMNS} FROM receipts")
        (result,) = ledger._read("SELECT call_node_id, digest, payload FROM results")
        (outbox,) = ledger._read("SELECT call_node_id, created_at_utc FROM outbox")
    key = str(steps[0][names.index("submission_key")])
    insert = (
        f"INSERT INTO operations ({', '.join(names)}) VALUES ({', '.join('?' * len(names))})",
        _template(steps[0], key),
    )
    updates = []
    version = names.index("version")
    for before, after in itertools.pairwise(steps):
        changed = [
            i for i, name in enumerate(names) if before[i] != after[i] or name == "updated_at_utc"
        ]
        sets = ", ".join(f"{names[i]} = ?" for i in changed)
        updates.append((
            f"UPDATE operations SET {sets} WHERE call_node_id = ? AND version = ?",
            _template((*(after[i] for i in changed), PLAN_NODE, before[version]), key),
        ))  # fmt: skip
    return RawPlan(
        key=key,
        insert=insert,
        updates=updates,
        history=[_template(row, key) for row in history],
        receipt=_template(receipt, key),
        result=_template(result, key),
        outbox_created=_template(outbox, key),
        record_json=str(steps[0][names.index("record_json")]),
    )


HISTORY_COLUMNS = "call_node_id, version, state, event, at, at_utc, owner, execution_epoch"
RECEIPT_COLUMNS = "call_node_id, result_digest, terminal_status, receipt_json, accepted_at_utc"
_HISTORY = f"INSERT INTO history ({HISTORY_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?)"
_RECEIPT = f"INSERT INTO receipts ({RECEIPT_COLUMNS}) VALUES (?, ?, ?, ?, ?)"
_RESULT = "INSERT INTO results (call_node_id, digest, payload) VALUES (?, ?, ?)"
_OUTBOX = "INSERT INTO outbox (receipt_id, call_node_id, created_at_utc) VALUES (?, ?, ?)"


def raw_stamp() -> str:
    return datetime.datetime.now(datetime.UTC).isoformat()


def open_raw(path: Path, synchronous: str) -> sqlite3.Connection:
    """The ledger's schema (its own migrations), then a plain connection as the ledger's."""
    SQLiteLedger(path, synchronous="off").close()
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute(f"PRAGMA synchronous={synchronous.upper()}")
    conn.execute("PRAGMA foreign_keys=ON")
    return conn


def raw_lifecycles(
    conn: sqlite3.Connection, plan: RawPlan, nodes: Iterable[str], stamp: Callable[[], str]
) -> None:
    """The planned rows of each node's lifecycle, in the ledger's eight transactions: the
    operation and its history row; each update with its history row; the last update
    with the receipt, result, outbox and history rows of acceptance."""
    execute, plan_key = conn.execute, plan.key
    for node in nodes:
        key = derive_submission_key(node)
        now = stamp()
        execute("BEGIN IMMEDIATE")
        execute(plan.insert[0], _fill(plan.insert[1], node, key, plan_key, now))
        execute(_HISTORY, _fill(plan.history[0], node, key, plan_key, now))
        execute("COMMIT")
        last = len(plan.updates) - 1
        for index, (statement, template) in enumerate(plan.updates):
            now = stamp()
            execute("BEGIN IMMEDIATE")
            execute(statement, _fill(template, node, key, plan_key, now))
            if index == last:
                receipt = execute(_RECEIPT, _fill(plan.receipt, node, key, plan_key, now))
                execute(_RESULT, _fill(plan.result, node, key, plan_key, now))
                execute(
                    _OUTBOX,
                    (receipt.lastrowid, *_fill(plan.outbox_created, node, key, plan_key, now)),
                )
            execute(_HISTORY, _fill(plan.history[index + 1], node, key, plan_key, now))
            execute("COMMIT")


def raw_per_s(path: Path, synchronous: str, count: int, plan: RawPlan) -> float:
    """The same rows, in the same schema and transactions, written by plain sqlite3."""
    conn = open_raw(path, synchronous)
    started = time.perf_counter()
    raw_lifecycles(conn, plan, (f"bench-{i}" for i in range(count)), raw_stamp)
    elapsed = time.perf_counter() - started
    conn.close()
    return count / elapsed


_COMPARED = (
    "SELECT * FROM operations ORDER BY call_node_id",
    f"SELECT {HISTORY_COLUMNS} FROM history ORDER BY call_node_id, version",
    "SELECT * FROM receipts ORDER BY receipt_id",
    "SELECT * FROM results ORDER BY call_node_id",
    "SELECT * FROM outbox ORDER BY outbox_id",
)


def check_same_rows(directory: Path, plan: RawPlan) -> None:
    """The raw writer's baseline is honest only if it writes exactly the ledger's rows:
    both write three lifecycles (fixed stamps), ours as it is timed, and every row of
    every table they touch is compared."""
    nodes = [f"check-{i}" for i in range(3)]
    with SQLiteLedger(
        directory / "check-ours.db", synchronous="off", utc_now=lambda: STAMP
    ) as ledger:
        ours_lifecycles(ledger, server_answers(nodes))
        ours = [ledger._read(query) for query in _COMPARED]
    conn = open_raw(directory / "check-raw.db", "off")
    raw_lifecycles(conn, plan, nodes, lambda: STAMP)
    raw = [conn.execute(query).fetchall() for query in _COMPARED]
    conn.close()
    for query, mine, theirs in zip(_COMPARED, ours, raw, strict=True):
        if mine != theirs:
            raise RuntimeError(f"the raw writer's rows differ from the ledger's: {query}")


def minimal_raw_per_s(path: Path, synchronous: str, count: int, record_json: str) -> float:
    """The first baseline: eight commits into a bare schema, no history rows."""
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute(f"PRAGMA synchronous={synchronous.upper()}")
    conn.executescript(
        "CREATE TABLE ops (id TEXT PRIMARY KEY, version INTEGER, state TEXT, doc TEXT);"
        "CREATE TABLE receipts (id TEXT PRIMARY KEY, doc TEXT);"
        "CREATE TABLE results (id TEXT PRIMARY KEY, payload BLOB);"
        "CREATE TABLE outbox (id TEXT PRIMARY KEY);"
    )
    started = time.perf_counter()
    for i in range(count):
        node = f"raw-{i}"
        conn.execute("BEGIN IMMEDIATE")
        conn.execute("INSERT INTO ops VALUES (?, 1, 'submitting', ?)", (node, record_json))
        conn.execute("COMMIT")
        for version in range(2, 8):
            conn.execute("BEGIN IMMEDIATE")
            conn.execute(
                "UPDATE ops SET version = ?, doc = ? WHERE id = ? AND version = ?",
                (version, record_json, node, version - 1),
            )
            conn.execute("COMMIT")
        conn.execute("BEGIN IMMEDIATE")
        conn.execute("UPDATE ops SET version = 8, doc = ? WHERE id = ?", (record_json, node))
        conn.execute("INSERT INTO receipts VALUES (?, ?)", (node, record_json))
        conn.execute("INSERT INTO results VALUES (?, ?)", (node, b'{"approved":true}'))
        conn.execute("INSERT INTO outbox VALUES (?)", (node,))
        conn.execute("COMMIT")
    elapsed = time.perf_counter() - started
    conn.close()
    return count / elapsed


def _small_rounds(directory: Path, synchronous: str, plan: RawPlan, record_json: str) -> None:
    """Every figure in alternating rounds of a few lifecycles, each into a new file."""
    figures: dict[str, list[float]] = {"ours": [], "ledger": [], "raw": [], "min": []}
    for index in range(ROUNDS):
        base = directory / f"{synchronous}-{index}"
        figures["ours"].append(ours_per_s(base.with_suffix(".ours.db"), synchronous, LIFECYCLES))
        figures["ledger"].append(
            ledger_only_per_s(base.with_suffix(".ledger.db"), synchronous, LIFECYCLES)
        )
        figures["raw"].append(raw_per_s(base.with_suffix(".raw.db"), synchronous, LIFECYCLES, plan))
        figures["min"].append(
            minimal_raw_per_s(base.with_suffix(".min.db"), synchronous, LIFECYCLES, record_json)
        )
    ours, only, raw, bare = (
        statistics.median(figures[k]) for k in ("ours", "ledger", "raw", "min")
    )
    print(
        f"synchronous={synchronous:<6} {LIFECYCLES} lifecycles a file, lifecycles/s: ours "
        f"{ours:7.1f}, ledger only {only:7.1f}, raw sqlite3 same rows {raw:7.1f} -> ours/raw "
        f"{ours / raw:.2f}, ledger-only/raw {only / raw:.2f}; minimal raw {bare:7.1f} "
        f"(ours/minimal {ours / bare:.2f})  (median of {ROUNDS} alternating rounds)"
    )


def _timed(work: Callable[[], None], count: int) -> tuple[float, float]:
    """Seconds of wall clock and of this process's CPU (user and system) per item."""
    wall, cpu = time.perf_counter(), time.process_time()
    work()
    return (time.perf_counter() - wall) / count, (time.process_time() - cpu) / count


def _sweep(directory: Path, plan: RawPlan) -> None:
    """synchronous=normal, both files growing to ``SWEEP_MAX`` lifecycles in alternating
    chunks: each chunk's cost per lifecycle, and ours/raw of neighbouring chunks, at each
    size of ``SWEEP_AT`` (the median of the chunks ending there and just before).

    At synchronous=normal a commit waits for no disk, so a lifecycle's cost is CPU: the
    verdict takes this process's CPU seconds (user and system), which other programs'
    load on a shared machine leaves alone; wall-clock figures are printed beside."""

    cost: dict[str, list[tuple[float, float]]] = {"ours": [], "raw": []}
    with SQLiteLedger(directory / "sweep-ours.db", synchronous="normal") as ledger:
        conn = open_raw(directory / "sweep-raw.db", "normal")
        for first in range(0, SWEEP_MAX, SWEEP_CHUNK):
            nodes = [f"bench-{i}" for i in range(first, first + SWEEP_CHUNK)]
            scripts = server_answers(nodes)
            cost["ours"].append(_timed(lambda: ours_lifecycles(ledger, scripts), SWEEP_CHUNK))  # noqa: B023
            cost["raw"].append(
                _timed(lambda: raw_lifecycles(conn, plan, nodes, raw_stamp), SWEEP_CHUNK)  # noqa: B023
            )
        conn.close()
    wall = [r[0] / o[0] for o, r in zip(cost["ours"], cost["raw"], strict=True)]
    cpu = [r[1] / o[1] for o, r in zip(cost["ours"], cost["raw"], strict=True)]
    print(
        f"synchronous=normal, both ledgers growing to {SWEEP_MAX:,} lifecycles in "
        f"{len(cpu)} alternating chunks of {SWEEP_CHUNK:,} (ours/raw = raw cost / ours):"
    )
    verdicts = []
    for size in (s for s in SWEEP_AT if s <= SWEEP_MAX):
        window = slice(max(0, size // SWEEP_CHUNK - 2), size // SWEEP_CHUNK)

        def us(name: str, which: int, window: slice = window) -> float:
            return statistics.median(c[which] for c in cost[name][window]) * 1e6

        ratio = statistics.median(cpu[window])
        verdicts.append(ratio >= TARGET)
        print(
            f"  at {size:>7,}: CPU ours {us('ours', 1):5.0f} us/lifecycle, raw "
            f"{us('raw', 1):5.0f} us -> ours/raw {ratio:.2f}; wall ours {us('ours', 0):5.0f} "
            f"us ({1e6 / us('ours', 0):6.1f}/s), raw {us('raw', 0):5.0f} us -> ours/raw "
            f"{statistics.median(wall[window]):.2f}"
        )

    def growth(name: str) -> float:
        ends = [c[1] for c in cost[name]]
        return statistics.median(ends[-2:]) / statistics.median(ends[:2])

    print(
        f"  ours/raw over every chunk: CPU median {statistics.median(cpu):.2f} (range "
        f"{min(cpu):.2f}-{max(cpu):.2f}), wall median {statistics.median(wall):.2f} (range "
        f"{min(wall):.2f}-{max(wall):.2f}); CPU per lifecycle, last chunks / first: ours "
        f"{growth('ours'):.2f}, raw {growth('raw'):.2f}; "
        f"{'meets' if all(verdicts) else 'misses'} the >= {TARGET:g} target (CPU) at every size"
    )


def run() -> None:
    with tempfile.TemporaryDirectory(prefix="longcall-bench-") as tmp:
        directory = Path(tmp)
        plan = plan_raw(directory / "plan.db")
        check_same_rows(directory, plan)
        print("raw sqlite3 writer: the same rows as the ledger's, checked row by row")
        for synchronous in ("full", "normal"):
            _small_rounds(directory, synchronous, plan, plan.record_json)
        _sweep(directory, plan)
