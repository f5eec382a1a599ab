"""A ledger's identity: its caller key scopes submission keys (C2); what is not a ledger
is refused, never silently recreated (C5).

Regressions: two separate ledgers calling the same node name at one server shared a
submission key (the second caller got the first one's operation and result, and anyone
could block node names like ``c1``); a ledger truncated to 0 bytes opened as a new,
empty one (every receipt gone, every node submitted again).
"""

from __future__ import annotations

import random
import sqlite3
from pathlib import Path

import pytest

from longcall.adapters.base import ToolBinding
from longcall.errors import LedgerRefused
from longcall.ledger import Ledger, SQLiteLedger
from longcall.runtime.engine import CallSpec, Engine

from .conftest import pg_schema

BINDING = ToolBinding(
    server="http://tools.example/mcp",
    tool_name="report",
    protocol="2026-07-28",
    adapter_version="1",
    descriptor_digest="sha256:d",
    task_support="required",
    idempotent=False,
    submission_lookup=True,
)


def start(ledger: Ledger, node: str = "c1") -> str:
    engine = Engine(ledger, rng=random.Random(1))
    record = engine.start_call(
        CallSpec(call_node_id=node, binding=BINDING, arguments={"x": 1}), now=0.0
    )
    return record.submission_key


def test_two_ledgers_derive_different_keys_for_one_node(tmp_path: Path) -> None:
    """The same node, tool and arguments in two ledgers: two keys (C2)."""
    with SQLiteLedger(tmp_path / "a.db") as a, SQLiteLedger(tmp_path / "b.db") as b:
        assert a.ledger_id != b.ledger_id
        assert start(a) != start(b)
        assert start(a, "c2").startswith("lc2-")


def test_the_key_survives_reopening(tmp_path: Path) -> None:
    """The caller key is made once: a restarted process derives the same key (X2)."""
    with SQLiteLedger(tmp_path / "a.db") as first:
        key, identity = start(first), (first.ledger_id, first.caller_key)
    with SQLiteLedger(tmp_path / "a.db") as again:
        assert (again.ledger_id, again.caller_key) == identity
        engine = Engine(again, rng=random.Random(2))
        assert engine.ledger.get("c1").submission_key == key


def test_an_empty_file_is_refused(tmp_path: Path) -> None:
    """A ledger truncated to 0 bytes is refused, and the file is left as it was (C5)."""
    path = tmp_path / "ledger.db"
    with SQLiteLedger(path) as ledger:
        start(ledger)
    path.write_bytes(b"")
    for sidecar in tmp_path.glob("ledger.db-*"):
        sidecar.unlink()
    with pytest.raises(LedgerRefused, match="empty"):
        SQLiteLedger(path)
    assert path.read_bytes() == b""


def test_a_foreign_or_damaged_file_is_refused(tmp_path: Path) -> None:
    """Another program's database, or bytes that are no database, are refused (C5)."""
    foreign = tmp_path / "app.db"
    with sqlite3.connect(foreign) as conn:
        conn.execute("CREATE TABLE customers (id INTEGER)")
    before = foreign.read_bytes()
    with pytest.raises(LedgerRefused, match="not a longcall ledger"):
        SQLiteLedger(foreign)
    # Left as found: not switched to WAL (a property of the file), not written.
    assert foreign.read_bytes() == before
    with sqlite3.connect(foreign) as conn:
        assert conn.execute("PRAGMA journal_mode").fetchone() == ("delete",)
    from longcall.server.store import open_store

    store = tmp_path / "tasks.db"
    open_store(f"sqlite:///{store}").close()
    with pytest.raises(LedgerRefused, match=r"not a longcall ledger .*a task store"):
        SQLiteLedger(store)
    damaged = tmp_path / "damaged.db"
    damaged.write_bytes(b"this is not sqlite " * 100)
    with pytest.raises(LedgerRefused, match="damaged"):
        SQLiteLedger(damaged)


@pytest.mark.postgres
def test_postgres_identity_and_foreign_schema() -> None:
    """The same on PostgreSQL: an identity per ledger, a foreign schema refused."""
    import psycopg
    from psycopg import sql

    from longcall.ledger.postgres import PostgresLedger

    with pg_schema() as (dsn, schema), pg_schema() as (_, other):
        with PostgresLedger(dsn, schema=schema) as a, PostgresLedger(dsn, schema=other) as b:
            assert start(a) != start(b)
            key = a.caller_key
        with PostgresLedger(dsn, schema=schema) as again:
            assert again.caller_key == key
    with pg_schema() as (dsn, schema):
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute(sql.SQL("CREATE SCHEMA {}").format(sql.Identifier(schema)))
            conn.execute(
                sql.SQL("CREATE TABLE {}.invoices (id INT)").format(sql.Identifier(schema))
            )
        with pytest.raises(LedgerRefused, match="not a longcall ledger"):
            PostgresLedger(dsn, schema=schema)
