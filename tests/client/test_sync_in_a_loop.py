"""SyncClient where an event loop already runs (a notebook cell, an async function): a
typed error that says to use Client, instead of asyncio's bare RuntimeError."""

from __future__ import annotations

from pathlib import Path

import pytest

from longcall import SyncClient, SyncClientInLoop
from longcall.errors import UsageError

pytestmark = pytest.mark.anyio


async def test_sync_client_inside_a_running_loop_says_to_use_client(tmp_path: Path) -> None:
    """Made, or used, inside a running loop: SyncClientInLoop naming Client."""
    with pytest.raises(SyncClientInLoop, match=r"use `async with longcall\.Client"):
        SyncClient(f"sqlite:///{tmp_path / 'l.db'}")
    assert issubclass(SyncClientInLoop, UsageError)


def test_sync_client_outside_a_loop_still_works(tmp_path: Path) -> None:
    """Without a running loop it opens, reads the ledger and closes as before."""
    from longcall.errors import UnknownCallNode

    with SyncClient(f"sqlite:///{tmp_path / 'l.db'}") as client, pytest.raises(UnknownCallNode):
        client.result("nothing-here")
