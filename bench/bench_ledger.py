"""Ledger throughput: full lifecycles accepted per second, against raw ``sqlite3`` making
the same commits, in the same process (L4).

A lifecycle is the "completed through an input round" walkthrough: create, then seven
events through the real machine, the last one ``accept_terminal`` (receipt, result,
outbox). Three figures per ``synchronous`` setting, in alternating rounds so that disk
and load swings hit each alike:

- **ours**: the walkthrough through the ledger API (the machine's decisions included);
- **ledger only**: the same records, decided beforehand, written through the ledger API;
- **raw**: plain ``sqlite3`` writing the same rows into the same schema (the ledger's own
  migrations, so the same tables, indexes and foreign keys) in the same eight
  transactions — an operations row and its history row, six updates each with its
  history row, then the update, receipt, result, outbox and history rows of acceptance.

Target: ours / raw >= 0.7 at ``synchronous=normal``. The first baseline, against a
smaller raw schema without history rows or indexes, is printed too ("minimal raw").
"""

from __future__ import annotations

import dataclasses
import json
import sqlite3
import statistics
import tempfile
import time
from pathlib import Path

from longcall.ledger import SQLiteLedger
from longcall.testing import scripted as walkthrough

LIFECYCLES = 60
ROUNDS = 5
TARGET = 0.7
"""Ours / raw lifecycles per second at synchronous=normal."""
STAMP = "2026-01-01T00:00:00.000000+00:00"


def ours_per_s(path: Path, synchronous: str, count: int) -> float:
    with SQLiteLedger(path, synchronous=synchronous) as ledger:
        started = time.perf_counter()
        for i in range(count):
            node = f"bench-{i}"
            walkthrough.start(ledger, node, walkthrough.COMPLETED, now=0.0)
            walkthrough.drive(ledger, node, walkthrough.COMPLETED, now=0.0)
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
            ledger.create(dataclasses.replace(first, call_node_id=node, submission_key=key))
            for version, after, event, accepts, payload in plan:
                after = dataclasses.replace(after, call_node_id=node, submission_key=key)  # type: ignore[arg-type]
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


def raw_per_s(path: Path, synchronous: str, count: int, record_json: str) -> float:
    """The same rows, in the same schema and transactions, written by plain sqlite3."""
    SQLiteLedger(path, synchronous="off").close()  # the ledger's schema, then nothing of it
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute(f"PRAGMA synchronous={synchronous.upper()}")
    conn.execute("PRAGMA foreign_keys=ON")
    history = (
        "INSERT INTO history (call_node_id, version, state, event, at, at_utc, owner,"
        " execution_epoch) VALUES (?, ?, ?, ?, 0.0, ?, NULL, 0)"
    )
    update = (
        "UPDATE operations SET version = ?, state = ?, operation_id = ?, record_json = ?,"
        " updated_at_utc = ?, execution_epoch = 0 WHERE call_node_id = ? AND version = ?"
    )
    started = time.perf_counter()
    for i in range(count):
        node = f"raw-{i}"
        conn.execute("BEGIN IMMEDIATE")
        conn.execute(
            "INSERT INTO operations (call_node_id, version, state, server, operation_id,"
            " submission_key, request_digest, tool_digest, record_json, created_at_utc,"
            " updated_at_utc, owner, execution_epoch, open)"
            " VALUES (?, 1, 'submitting', 's', NULL, ?, 'd', 't', ?, ?, ?, NULL, 0, 1)",
            (node, f"key-{node}", record_json, STAMP, STAMP),
        )
        conn.execute(history, (node, 1, "submitting", "Created", STAMP))
        conn.execute("COMMIT")
        for version in range(2, 8):
            conn.execute("BEGIN IMMEDIATE")
            conn.execute(update, (version, "working", "op", record_json, STAMP, node, version - 1))
            conn.execute(history, (node, version, "working", "Step", STAMP))
            conn.execute("COMMIT")
        conn.execute("BEGIN IMMEDIATE")
        conn.execute(update, (8, "accepted", "op", record_json, STAMP, node, 7))
        receipt_id = conn.execute(
            "INSERT INTO receipts (call_node_id, result_digest, terminal_status, receipt_json,"
            " accepted_at_utc) VALUES (?, 'd', 'completed', ?, ?)",
            (node, record_json[:600], STAMP),
        ).lastrowid
        conn.execute(
            "INSERT INTO results (call_node_id, digest, payload) VALUES (?, 'd', ?)",
            (node, b'{"approved":true}'),
        )
        conn.execute(
            "INSERT INTO outbox (receipt_id, call_node_id, created_at_utc) VALUES (?, ?, ?)",
            (receipt_id, node, STAMP),
        )
        conn.execute(history, (node, 8, "accepted", "ResultFetched", STAMP))
        conn.execute("COMMIT")
    elapsed = time.perf_counter() - started
    conn.close()
    return count / elapsed


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


def run() -> None:
    with tempfile.TemporaryDirectory(prefix="longcall-bench-") as tmp:
        probe = Path(tmp) / "probe.db"
        with SQLiteLedger(probe, synchronous="off") as ledger:
            walkthrough.start(ledger, "probe", walkthrough.COMPLETED, now=0.0)
            record_json = json.dumps(
                json.loads(ledger._read("SELECT record_json FROM operations")[0][0])
            )
        for synchronous in ("full", "normal"):
            figures: dict[str, list[float]] = {"ours": [], "ledger": [], "raw": [], "min": []}
            for index in range(ROUNDS):
                base = Path(tmp) / f"{synchronous}-{index}"
                figures["ours"].append(
                    ours_per_s(base.with_suffix(".ours.db"), synchronous, LIFECYCLES)
                )
                figures["ledger"].append(
                    ledger_only_per_s(base.with_suffix(".ledger.db"), synchronous, LIFECYCLES)
                )
                figures["raw"].append(
                    raw_per_s(base.with_suffix(".raw.db"), synchronous, LIFECYCLES, record_json)
                )
                figures["min"].append(
                    minimal_raw_per_s(
                        base.with_suffix(".min.db"), synchronous, LIFECYCLES, record_json
                    )
                )
            ours, only, raw, bare = (
                statistics.median(figures[k]) for k in ("ours", "ledger", "raw", "min")
            )
            target = ""
            if synchronous == "normal":
                verdict = "meets" if ours / raw >= TARGET else "misses"
                target = f" ({verdict} the >= {TARGET:g} target)"
            print(
                f"synchronous={synchronous:<6} lifecycles/s: ours {ours:7.1f}, ledger only "
                f"{only:7.1f}, raw sqlite3 same commits {raw:7.1f} -> ours/raw {ours / raw:.2f}"
                f"{target}, ledger-only/raw {only / raw:.2f}; minimal raw {bare:7.1f} "
                f"(ours/minimal {ours / bare:.2f})  (median of {ROUNDS} alternating rounds)"
            )
