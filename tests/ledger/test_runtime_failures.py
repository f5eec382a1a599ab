"""A database that fails while in use is the ledger's own error, translated at its edge:
``LedgerUnavailable`` naming the ledger (never the DSN), not the driver's exception."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from longcall.errors import LedgerUnavailable
from longcall.ledger import SQLiteLedger

from .conftest import pg_schema
from .test_contract import fresh


def test_a_sqlite_file_locked_past_the_busy_timeout_is_unavailable(tmp_path: Path) -> None:
    """Another process holding the file's write lock: a write fails as
    ``LedgerUnavailable`` saying it is locked (a read goes on: WAL), and the ledger
    works once the lock is let go."""
    path = tmp_path / "ledger.db"
    with SQLiteLedger(path) as ledger:
        ledger.create(fresh("before"))
        ledger._conn.execute("PRAGMA busy_timeout=0")  # fail at once, not in 10 s
        other = sqlite3.connect(path, isolation_level=None)
        other.execute("BEGIN EXCLUSIVE")  # no reader, no writer until it ends
        try:
            with pytest.raises(LedgerUnavailable, match="locked") as written:
                ledger.create(fresh("during"))
            assert isinstance(written.value.__cause__, sqlite3.OperationalError)
            assert str(path) in str(written.value)
            assert ledger.find("before") is not None
        finally:
            other.execute("ROLLBACK")
            other.close()
        ledger.create(fresh("after"))
        assert ledger.find("during") is None
        assert ledger.find("before") is not None
        assert ledger.find("after") is not None


@pytest.mark.postgres
def test_a_lost_postgresql_connection_is_unavailable() -> None:
    """The server ends the ledger's session: the next read and write fail as
    ``LedgerUnavailable`` naming the schema, with no DSN in the message."""
    import psycopg

    from longcall.ledger.postgres import PostgresLedger

    with pg_schema() as (dsn, schema), PostgresLedger(dsn, schema=schema) as ledger:
        ledger.create(fresh("before"))
        pid = ledger._conn.info.backend_pid
        with psycopg.connect(dsn, autocommit=True) as admin:
            admin.execute("SELECT pg_terminate_backend(%s)", (pid,))
        with pytest.raises(LedgerUnavailable, match=schema) as read:
            ledger.find("before")
        assert isinstance(read.value.__cause__, psycopg.OperationalError)
        assert dsn not in str(read.value)
        with pytest.raises(LedgerUnavailable, match=schema):
            ledger.create(fresh("after"))
