"""Schema versions and damaged rows, on both backends (SPEC L7: a restart loses nothing)."""

from __future__ import annotations

import dataclasses
import json
import sqlite3
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from longcall.core import State
from longcall.ledger import CorruptRow, Ledger, SchemaTooNew, open_ledger
from longcall.ledger import postgres as pg_backend
from longcall.ledger import sqlite as sqlite_backend

from .conftest import insert_old_row, pg_schema
from .test_contract import PAYLOAD, fetched, fresh, to_fetching


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class Store:
    """One backend's ledger location: open a ledger there, or run raw SQL beside it."""

    schema_version: int
    open: Callable[[], Ledger]
    sql: Callable[[str], list[tuple[Any, ...]]]


def _sqlite_store(path: Path) -> Store:
    def run(statement: str) -> list[tuple[Any, ...]]:
        conn = sqlite3.connect(path, isolation_level=None)
        try:
            return conn.execute(statement).fetchall()
        finally:
            conn.close()

    return Store(
        schema_version=sqlite_backend.SCHEMA_VERSION,
        open=lambda: sqlite_backend.SQLiteLedger(path, synchronous="normal"),
        sql=run,
    )


def _pg_store(dsn: str, schema: str) -> Store:
    import psycopg
    from psycopg import sql

    def run(statement: str) -> list[tuple[Any, ...]]:
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute(sql.SQL("SET search_path TO {}").format(sql.Identifier(schema)))
            cursor = conn.execute(statement.encode())
            return cursor.fetchall() if cursor.description else []

    return Store(
        schema_version=pg_backend.SCHEMA_VERSION,
        open=lambda: pg_backend.PostgresLedger(dsn, schema=schema),
        sql=run,
    )


@pytest.fixture(params=["sqlite", "postgres"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Store]:
    """An empty ledger location of each backend."""
    if request.param == "sqlite":
        yield _sqlite_store(tmp_path / "ledger.db")
    else:
        with pg_schema() as (dsn, schema):
            yield _pg_store(dsn, schema)


def test_schema_version_table_exists(store: Store) -> None:
    """A new ledger records every migration it ran in schema_version."""
    with store.open() as ledger:
        assert ledger.schema_version() == store.schema_version  # type: ignore[attr-defined]
    versions = [row[0] for row in store.sql("SELECT version FROM schema_version ORDER BY 1")]
    assert versions == list(range(1, store.schema_version + 1))


def test_reopen_is_a_noop_migration(store: Store) -> None:
    """Reopening an existing ledger runs no migration and keeps every row."""
    with store.open() as ledger:
        record = ledger.create(fresh())
    before = store.sql("SELECT version FROM schema_version ORDER BY 1")
    with store.open() as ledger:
        assert ledger.get("node-1") == record
        assert [h.version for h in ledger.history("node-1")] == [1]
    assert store.sql("SELECT version FROM schema_version ORDER BY 1") == before


def test_newer_schema_is_refused(store: Store) -> None:
    """A store written by a newer schema raises SchemaTooNew and is left as it was."""
    with store.open() as ledger:
        ledger.create(fresh())
    newer = store.schema_version + 1
    store.sql(f"INSERT INTO schema_version (version) VALUES ({newer})")
    with pytest.raises(SchemaTooNew, match=f"{newer} is newer"):
        store.open()
    assert store.sql("SELECT max(version) FROM schema_version") == [(newer,)]
    assert store.sql("SELECT call_node_id FROM operations") == [("node-1",)]


def _valid_record_json_with(**changes: object) -> str:
    data = json.loads(json.dumps(dataclasses.asdict(fresh()), default=str))
    data["state"] = State.SUBMITTING.value
    data.update(changes)
    return json.dumps(data)


@pytest.mark.parametrize(
    "damaged",
    [
        pytest.param("{not json", id="truncated"),
        pytest.param("[1, 2]", id="not-an-object"),
        pytest.param(_valid_record_json_with(colour="red"), id="unknown-field"),
        pytest.param(_valid_record_json_with(state="nope"), id="bad-enum"),
        pytest.param(_valid_record_json_with(warnings=7), id="bad-tuple"),
    ],
)
def test_damaged_record_json_is_corrupt_row(store: Store, damaged: str) -> None:
    """A record_json that does not decode is reported as CorruptRow, never half-read."""
    with store.open() as ledger:
        ledger.create(fresh())
    quoted = damaged.replace("'", "''")
    store.sql(f"UPDATE operations SET record_json = '{quoted}'")
    with store.open() as ledger:
        with pytest.raises(CorruptRow):
            ledger.get("node-1")
        with pytest.raises(CorruptRow):
            ledger.list_by_state()


def test_damaged_receipt_json_is_corrupt_row(store: Store) -> None:
    """A damaged receipt_json is reported as CorruptRow too."""
    with store.open() as ledger:
        r = to_fetching(ledger)
        accepted, receipt = fetched(r)
        ledger.accept_terminal(
            accepted, receipt, expected_version=r.version, result_payload=PAYLOAD, event="x"
        )
    store.sql("UPDATE receipts SET receipt_json = '{\"call_node_id\": 1'")
    with store.open() as ledger:
        with pytest.raises(CorruptRow):
            ledger.receipt("node-1")
        with pytest.raises(CorruptRow):
            ledger.receipts()


def test_open_ledger_postgres_url_takes_schema_option() -> None:
    """open_ledger routes postgresql:// and postgres:// URLs, with ?schema= chosen there."""
    with pg_schema() as (dsn, schema):
        for scheme in ("postgresql", "postgres"):
            url = scheme + "://" + dsn.split("://", 1)[1]
            sep = "&" if "?" in url else "?"
            with open_ledger(f"{url}{sep}schema={schema}&connect_timeout=5") as ledger:
                assert isinstance(ledger, pg_backend.PostgresLedger)
                assert ledger.schema == schema
                assert ledger.schema_version() == pg_backend.SCHEMA_VERSION


def test_a_postgres_schema_without_a_ledger_is_missing_when_it_must_not_be_made() -> None:
    """With ``create=False`` (the commands that only read) a schema holding no ledger is
    refused as missing, and nothing is left behind: not the tables, not the schema."""
    import psycopg

    from longcall.errors import LedgerMissing

    with pg_schema() as (dsn, schema):
        url = f"{dsn}{'&' if '?' in dsn else '?'}schema={schema}"
        with pytest.raises(LedgerMissing, match=f"no ledger in the PostgreSQL schema '{schema}'"):
            open_ledger(url, create=False)
        with psycopg.connect(dsn) as conn:
            found = conn.execute(
                "SELECT count(*) FROM information_schema.schemata WHERE schema_name = %s",
                (schema,),
            ).fetchone()
        assert found == (0,)
        with open_ledger(url) as made:  # the default makes it; then it is found
            assert made.schema_version() == pg_backend.SCHEMA_VERSION
        with open_ledger(url, create=False) as found_again:
            assert found_again.schema_version() == pg_backend.SCHEMA_VERSION


def _older_rows(open_at: Callable[[], Ledger], insert: Callable[[str], Any]) -> None:
    """Rows written before migration 4 gain the lease columns from their records."""
    records = [
        dataclasses.replace(fresh("open-1"), execution_epoch=3),
        dataclasses.replace(fresh("done-1"), state=State.ACCEPTED),
    ]
    for record in records:
        insert(record)
    with open_at() as ledger:
        assert ledger.open_versions() == {"open-1": 1}
        ledger.register_worker("w", kind="worker", now=1.0, lease_s=5.0)
        (claimed,) = ledger.claim(
            "w",
            now=1.0,
            limit=5,
            decide=lambda r: dataclasses.replace(
                r, execution_epoch=r.execution_epoch + 1, version=r.version + 1
            ),
        )
        assert (claimed.record.call_node_id, claimed.record.execution_epoch) == ("open-1", 4)


def test_migration_4_fills_lease_columns_sqlite(tmp_path: Path) -> None:
    """SQLite: an open v3 row is claimable at its recorded epoch; an accepted one is not."""
    path = tmp_path / "ledger.db"

    class V3(sqlite_backend.SQLiteLedger):
        migrations = sqlite_backend.MIGRATIONS[:3]

    V3(path).close()

    def insert(record: Any) -> None:
        insert_old_row(path, record)

    _older_rows(lambda: sqlite_backend.SQLiteLedger(path), insert)


def test_migration_4_fills_lease_columns_postgres() -> None:
    """PostgreSQL: the same upgrade of rows written before leases existed."""
    with pg_schema() as (dsn, schema):

        class V3(pg_backend.PostgresLedger):
            migrations = pg_backend.MIGRATIONS[:3]

        V3(dsn, schema=schema).close()

        def insert(record: Any) -> None:
            insert_old_row((dsn, schema), record)

        _older_rows(lambda: pg_backend.PostgresLedger(dsn, schema=schema), insert)
