"""Ledger fixtures: one contract suite, parametrised by backend (SPEC L4–L7, D1).

PostgreSQL runs where ``LONGCALL_PG_DSN`` (default: the local server) is reachable;
elsewhere its cases skip with the reason. In CI they must run: ``.ci/run`` sets
``LONGCALL_REQUIRE_PG=1``, which turns an unreachable server into a failure. Each
PostgreSQL case gets its own schema ``lc_test_<random>``, dropped afterwards, so
cases never see each other's rows.
"""

from __future__ import annotations

import contextlib
import functools
import os
import secrets
import sqlite3
from collections.abc import Iterator
from pathlib import Path

import pytest

from longcall.core import OperationRecord
from longcall.ledger import Ledger, SQLiteLedger, codec

BACKENDS = ["sqlite", "postgres"]
DEFAULT_PG_DSN = "postgresql://postgres@127.0.0.1:5432/test"
PG_CONNECT_TIMEOUT_S = 3


def pg_dsn() -> str:
    """The PostgreSQL server the tests use."""
    return os.environ.get("LONGCALL_PG_DSN", DEFAULT_PG_DSN)


@functools.cache
def _pg_unreachable_reason() -> str | None:
    """Why the server cannot be used (None when it can); asked once per session."""
    try:
        import psycopg
    except ImportError as exc:  # pragma: no cover - psycopg is a dev dependency
        return f"psycopg is not installed ({exc})"
    try:
        with psycopg.connect(pg_dsn(), connect_timeout=PG_CONNECT_TIMEOUT_S) as conn:
            conn.execute("SELECT 1")
    except psycopg.Error as exc:
        return f"no PostgreSQL at LONGCALL_PG_DSN={pg_dsn()!r}: {exc}".strip()
    return None


def require_pg() -> str:
    """The DSN, or skip (fail when LONGCALL_REQUIRE_PG=1) if no server answers."""
    reason = _pg_unreachable_reason()
    if reason is not None:
        if os.environ.get("LONGCALL_REQUIRE_PG") == "1":
            pytest.fail(f"LONGCALL_REQUIRE_PG=1 but {reason}", pytrace=False)
        pytest.skip(reason)
    return pg_dsn()


def drop_schema(dsn: str, schema: str) -> None:
    """Drop a test schema and everything in it."""
    import psycopg
    from psycopg import sql

    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema)))


@contextlib.contextmanager
def pg_schema() -> Iterator[tuple[str, str]]:
    """A fresh schema name (dsn, schema), dropped on exit."""
    dsn = require_pg()
    schema = f"lc_test_{secrets.token_hex(6)}"
    try:
        yield dsn, schema
    finally:
        drop_schema(dsn, schema)


@pytest.fixture
def pg() -> Iterator[tuple[str, str]]:
    """A PostgreSQL DSN and a schema name of this test alone."""
    with pg_schema() as found:
        yield found


@pytest.fixture(params=BACKENDS)
def ledger(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Ledger]:
    """A fresh, empty ledger of each backend."""
    if request.param == "sqlite":
        with SQLiteLedger(tmp_path / "ledger.db", synchronous="normal") as store:
            yield store
    elif request.param == "postgres":
        from longcall.ledger.postgres import PostgresLedger

        with pg_schema() as (dsn, schema), PostgresLedger(dsn, schema=schema) as store:
            yield store
    else:  # pragma: no cover - other backends register themselves here
        raise AssertionError(request.param)


def insert_old_row(
    target: Path | tuple[str, str], record: OperationRecord, **columns: object
) -> None:
    """Write ``record`` by hand as the bare operations row of an older schema: the
    columns every version had, the identity digests where SQLite keeps them, and
    ``columns`` on top (``open=1``, say). ``target`` is a SQLite file or PostgreSQL's
    ``(dsn, schema)``."""
    values: dict[str, object] = {
        "call_node_id": record.call_node_id,
        "version": 1,
        "state": record.state.value,
        "server": "s",
        "operation_id": None,
        "submission_key": record.submission_key,
        "record_json": codec.dumps(record),
        "created_at_utc": "t",
        "updated_at_utc": "t",
    }
    if isinstance(target, Path):
        values |= {"request_digest": record.request_digest}
        values |= {"tool_digest": record.tool_descriptor_digest}
    values |= columns
    names = ", ".join(values)
    if isinstance(target, Path):
        conn = sqlite3.connect(target, isolation_level=None)
        try:
            marks = ", ".join("?" * len(values))
            conn.execute(
                f"INSERT INTO operations ({names}) VALUES ({marks})", tuple(values.values())
            )
        finally:
            conn.close()
        return
    import psycopg
    from psycopg import sql

    dsn, schema = target
    with psycopg.connect(dsn, autocommit=True) as pg_conn:
        pg_conn.execute(sql.SQL("SET search_path TO {}").format(sql.Identifier(schema)))
        marks = ", ".join(["%s"] * len(values))
        pg_conn.execute(
            f"INSERT INTO operations ({names}) VALUES ({marks})",  # type: ignore[arg-type]
            tuple(values.values()),
        )


@pytest.fixture(params=["sqlite", "postgres"])
def twins(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[Ledger, Ledger]]:
    """Two ledgers (two connections: two workers) on one empty store of each backend."""
    if request.param == "sqlite":
        path = tmp_path / "ledger.db"
        with SQLiteLedger(path, synchronous="off") as a, SQLiteLedger(path, synchronous="off") as b:
            yield a, b
    else:
        from longcall.ledger.postgres import PostgresLedger

        with (
            pg_schema() as (dsn, schema),
            PostgresLedger(dsn, schema=schema) as a,
            PostgresLedger(dsn, schema=schema) as b,
        ):
            yield a, b
