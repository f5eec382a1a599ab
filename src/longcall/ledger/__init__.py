"""The durable ledger of operations, receipts, results and the ready outbox.

``open_ledger(url)`` picks the backend: ``sqlite:///relative.db``,
``sqlite:////absolute/path.db`` (optionally ``?synchronous=normal``),
``sqlite://:memory:``, or ``postgresql://user@host:5432/db`` (also ``postgres://``;
optionally ``?schema=name``, every other option goes to libpq). This package imports
only ``longcall.core`` (and psycopg, lazily, for PostgreSQL) and never an adapter
(DESIGN.md import direction).
"""

from __future__ import annotations

from urllib.parse import parse_qs, parse_qsl, urlencode, urlsplit, urlunsplit

from longcall.errors import (
    CorruptRow,
    DuplicateCallNode,
    Fenced,
    SchemaTooNew,
    UnsupportedLedgerURL,
)
from longcall.ledger.base import (
    ADAPTER_STATES,
    CLIENT,
    WORKER,
    AdapterPlan,
    Census,
    Claim,
    Fence,
    HistoryRow,
    Ledger,
    OutboxRow,
    WorkerRow,
)
from longcall.ledger.budget import PollGrant
from longcall.ledger.sqlite import SQLiteLedger

DEFAULT_LEDGER_URL = "sqlite:///longcall.db"


def open_ledger(url: str) -> Ledger:
    """Open (and migrate) the ledger a URL names."""
    parts = urlsplit(url)
    options = {k: v[-1] for k, v in parse_qs(parts.query).items()}
    if parts.scheme == "sqlite":
        path = ":memory:" if parts.netloc == ":memory:" else parts.path[1:] if parts.path else ""
        if not path:
            raise UnsupportedLedgerURL(f"{url!r}: use sqlite:///file.db or sqlite://:memory:")
        return SQLiteLedger(path, synchronous=options.get("synchronous", "full"))
    if parts.scheme in ("postgresql", "postgres"):
        # Imported here: psycopg is the optional ``postgres`` extra.
        from longcall.ledger.postgres import DEFAULT_SCHEMA, PostgresLedger

        libpq = [(k, v) for k, v in parse_qsl(parts.query) if k != "schema"]
        dsn = urlunsplit(parts._replace(query=urlencode(libpq)))
        return PostgresLedger(dsn, schema=options.get("schema", DEFAULT_SCHEMA))
    raise UnsupportedLedgerURL(f"{url!r}: no ledger backend for scheme {parts.scheme!r}")


__all__ = [
    "ADAPTER_STATES",
    "CLIENT",
    "DEFAULT_LEDGER_URL",
    "WORKER",
    "AdapterPlan",
    "Census",
    "Claim",
    "CorruptRow",
    "DuplicateCallNode",
    "Fence",
    "Fenced",
    "HistoryRow",
    "Ledger",
    "OutboxRow",
    "PollGrant",
    "SQLiteLedger",
    "SchemaTooNew",
    "UnsupportedLedgerURL",
    "WorkerRow",
    "open_ledger",
]
