"""The durable ledger of operations, receipts, results and the ready outbox.

``open_ledger(url)`` picks the backend: ``sqlite:///relative.db``,
``sqlite:////absolute/path.db`` (optionally ``?synchronous=normal``),
``sqlite://:memory:``, or ``postgresql://user@host:5432/db`` (also ``postgres://``;
optionally ``?schema=name``, every other option goes to libpq). This package imports
only ``longcall.core`` (and psycopg, lazily, for PostgreSQL) and never an adapter
(docs/design/layers.md).
"""

from __future__ import annotations

import sqlite3
from pathlib import Path
from urllib.parse import parse_qs, parse_qsl, urlencode, urlsplit, urlunsplit

from longcall.errors import (
    CorruptRow,
    DuplicateCallNode,
    Fenced,
    LedgerMissing,
    LedgerUnavailable,
    SchemaTooNew,
    UnsupportedLedgerURL,
)
from longcall.ledger.base import (
    ADAPTER_STATES,
    CLIENT,
    REFUSAL_REASONS,
    WAITING_REASONS,
    WORKER,
    AcceptedFigures,
    AdapterPlan,
    BreakerRow,
    Census,
    Claim,
    Downtime,
    Fence,
    HistoryRow,
    Holding,
    Ledger,
    ListedOperation,
    OperationQuery,
    OutboxRow,
    PollBudgetRow,
    RefusedWrite,
    ServerRetries,
    ServerUse,
    ShadowComparison,
    VersionSet,
    WorkerRow,
)
from longcall.ledger.budget import BudgetUse, PollGrant
from longcall.ledger.sqlite import SQLITE_SYNCHRONOUS, SQLiteLedger

DEFAULT_LEDGER_URL = "sqlite:///longcall.db"


def sqlite_path(url: str) -> str | None:
    """The file a ``sqlite:`` URL names (``:memory:`` for memory), or None for another
    scheme."""
    parts = urlsplit(url)
    if parts.scheme != "sqlite":
        return None
    if parts.netloc == ":memory:":
        return ":memory:"
    # Only sqlite:///relative.db and sqlite:////absolute.db: the third slash ends an
    # empty authority. Anything else (sqlite:x.db, sqlite://host/x.db) would name a
    # file the user did not write, so it is refused, never guessed at.
    if parts.netloc or not url.startswith("sqlite:///") or not parts.path[1:]:
        raise UnsupportedLedgerURL(f"{url!r}: use sqlite:///file.db or sqlite://:memory:")
    return parts.path[1:]


def open_ledger(url: str, *, create: bool = True) -> Ledger:
    """Open (and migrate) the ledger a URL names.

    With ``create=False`` a ledger that does not exist (a SQLite file, a PostgreSQL
    schema without the ledger's tables) is refused (LedgerMissing) instead of being
    made: a command that only reads must not leave an empty ledger behind. Driver
    errors while opening are translated here, once, into LedgerUnavailable (one line:
    which ledger, and why)."""
    parts = urlsplit(url)
    options = {k: v[-1] for k, v in parse_qs(parts.query).items()}
    path = sqlite_path(url)
    if path is not None:
        synchronous = options.get("synchronous", "full")
        if synchronous.lower() not in SQLITE_SYNCHRONOUS:
            raise UnsupportedLedgerURL(
                f"{url!r}: synchronous must be one of {', '.join(SQLITE_SYNCHRONOUS)}"
            )
        try:
            if path != ":memory:":
                _check_sqlite_file(Path(path), create=create)
            return SQLiteLedger(path, synchronous=synchronous)
        except sqlite3.Error as exc:
            raise LedgerUnavailable(f"cannot open the ledger {path}: {exc}") from exc
        except OSError as exc:
            reason = exc.strerror or str(exc)
            raise LedgerUnavailable(f"cannot open the ledger {path}: {reason}") from exc
    if parts.scheme in ("postgresql", "postgres"):
        # Imported here: psycopg is the optional ``postgres`` extra.
        import psycopg

        from longcall.ledger.postgres import DEFAULT_SCHEMA, PostgresLedger

        libpq = [(k, v) for k, v in parse_qsl(parts.query) if k != "schema"]
        dsn = urlunsplit(parts._replace(query=urlencode(libpq)))
        # Never the password in a message: user@host:port/db only.
        shown = urlunsplit(parts._replace(netloc=parts.netloc.rpartition("@")[2], query=""))
        try:
            return PostgresLedger(dsn, schema=options.get("schema", DEFAULT_SCHEMA), create=create)
        except psycopg.Error as exc:
            reason = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
            raise LedgerUnavailable(f"cannot open the ledger at {shown}: {reason}") from exc
    raise UnsupportedLedgerURL(
        f"{url!r}: no ledger backend for scheme {parts.scheme!r}"
        " (use sqlite:///PATH or postgresql://…)"
    )


def _check_sqlite_file(path: Path, *, create: bool) -> None:
    if path.is_dir():
        raise LedgerUnavailable(f"cannot open the ledger {path}: it is a directory")
    if path.exists():
        return
    if not create:
        raise LedgerMissing(f"no ledger at {path}")
    if not path.parent.is_dir():
        raise LedgerUnavailable(
            f"cannot create the ledger {path}: the directory {path.parent} does not exist"
        )


__all__ = [
    "ADAPTER_STATES",
    "CLIENT",
    "DEFAULT_LEDGER_URL",
    "REFUSAL_REASONS",
    "WAITING_REASONS",
    "WORKER",
    "AcceptedFigures",
    "AdapterPlan",
    "BreakerRow",
    "BudgetUse",
    "Census",
    "Claim",
    "CorruptRow",
    "Downtime",
    "DuplicateCallNode",
    "Fence",
    "Fenced",
    "HistoryRow",
    "Holding",
    "Ledger",
    "LedgerMissing",
    "LedgerUnavailable",
    "ListedOperation",
    "OperationQuery",
    "OutboxRow",
    "PollBudgetRow",
    "PollGrant",
    "RefusedWrite",
    "SQLiteLedger",
    "SchemaTooNew",
    "ServerRetries",
    "ServerUse",
    "ShadowComparison",
    "UnsupportedLedgerURL",
    "VersionSet",
    "WorkerRow",
    "open_ledger",
    "sqlite_path",
]
