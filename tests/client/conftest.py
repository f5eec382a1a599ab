"""The reference server on 127.0.0.1 behind a fault layer, and a file ledger URL."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from tests.e2e.conftest import FaultLayer, serve

from longcall.server import build_reference_server


@dataclass
class Peer:
    """A running reference server: its MCP URL and the fault layer in front of it."""

    url: str
    faults: FaultLayer
    ledger: str

    @property
    def base(self) -> str:
        return self.url.removesuffix("/mcp")


@pytest.fixture
async def peer(tmp_path: Path) -> AsyncIterator[Peer]:
    """A fresh reference server (its own task store) and a ledger URL in ``tmp_path``."""
    server = build_reference_server(store=f"sqlite:///{tmp_path / 'tasks.db'}")
    faults = FaultLayer(server.asgi_app())
    async with serve(faults) as url:
        yield Peer(url=url, faults=faults, ledger=f"sqlite:///{tmp_path / 'ledger.db'}")
