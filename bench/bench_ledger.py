"""Ledger throughput: full lifecycles accepted per second through the ledger API,
against the same number of raw ``sqlite3`` commits in the same process (issue 2).

A lifecycle is the "completed through an input round" walkthrough: create, then seven
events through the real machine, the last one ``accept_terminal`` (receipt, result,
outbox). The baseline makes the same eight commits with plain ``sqlite3`` on a file
with the same pragmas — one insert, six updates, then an update plus three inserts —
carrying the same JSON record. Target: ratio >= 0.5 at the default (synchronous=FULL).
"""

from __future__ import annotations

import json
import sqlite3
import statistics
import tempfile
import time
from pathlib import Path

from longcall import walkthrough
from longcall.ledger import SQLiteLedger

LIFECYCLES = 60
ROUNDS = 5


def ledger_lifecycles_per_s(path: Path, synchronous: str, count: int) -> float:
    with SQLiteLedger(path, synchronous=synchronous) as ledger:
        started = time.perf_counter()
        for i in range(count):
            node = f"bench-{i}"
            walkthrough.start(ledger, node, walkthrough.COMPLETED, now=0.0)
            walkthrough.drive(ledger, node, walkthrough.COMPLETED, now=0.0)
        elapsed = time.perf_counter() - started
    return count / elapsed


def raw_lifecycles_per_s(path: Path, synchronous: str, count: int, record_json: str) -> float:
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
    """Alternate short rounds of ours and raw, so disk and load swings hit both alike."""
    with tempfile.TemporaryDirectory(prefix="longcall-bench-") as tmp:
        probe = Path(tmp) / "probe.db"
        with SQLiteLedger(probe, synchronous="off") as ledger:
            walkthrough.start(ledger, "probe", walkthrough.COMPLETED, now=0.0)
            record_json = json.dumps(
                json.loads(ledger._read("SELECT record_json FROM operations")[0][0])
            )
        for synchronous in ("full", "normal"):
            ours_rounds, raw_rounds = [], []
            for index in range(ROUNDS):
                ours_path = Path(tmp) / f"ours-{synchronous}-{index}.db"
                raw_path = Path(tmp) / f"raw-{synchronous}-{index}.db"
                ours_rounds.append(ledger_lifecycles_per_s(ours_path, synchronous, LIFECYCLES))
                raw_rounds.append(
                    raw_lifecycles_per_s(raw_path, synchronous, LIFECYCLES, record_json)
                )
            ours, raw = statistics.median(ours_rounds), statistics.median(raw_rounds)
            target = " (target >= 0.5)" if synchronous == "full" else ""
            print(
                f"synchronous={synchronous:<6} ledger: {ours:8.1f} lifecycles/s  "
                f"raw sqlite3 (8 commits each): {raw:8.1f}/s  ratio {ours / raw:.2f}{target}"
                f"  (median of {ROUNDS} alternating rounds)"
            )
