"""Ledger fixtures: one contract suite, parametrised by backend (SPEC L4–L7, D1).

PostgreSQL runs where ``LONGCALL_PG_DSN`` (default: the local server) is reachable;
elsewhere its cases skip with the reason. In CI they must run: ``.ci/run`` sets
``LONGCALL_REQUIRE_PG=1``, which turns an unreachable server into a failure.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from longcall.ledger import Ledger, SQLiteLedger

BACKENDS = ["sqlite"]


@pytest.fixture(params=BACKENDS)
def ledger(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Ledger]:
    """A fresh, empty ledger of each backend."""
    if request.param == "sqlite":
        store = SQLiteLedger(tmp_path / "ledger.db", synchronous="normal")
    else:  # pragma: no cover - other backends register themselves here
        raise AssertionError(request.param)
    with store:
        yield store
