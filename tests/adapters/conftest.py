"""Adapter test fixtures: the reference server in-process on a free 127.0.0.1 port, a
record driver that runs adapter outcomes through the real core machine, and waits on
the server's own change events (never sleeps)."""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import AsyncIterator, Iterable
from pathlib import Path

import anyio
import pytest
from tests.bounds import LOADED_MACHINE_S

from longcall.adapters.base import Adapter, Outcome, ToolBinding
from longcall.core import OperationRecord, handle, new_operation
from longcall.core.events import Event, ResultFetchStarted
from longcall.core.keys import request_digest
from longcall.server import LongcallServer, build_reference_server, running_server
from longcall.testing.faults import LoseCreateResponse

WAIT_LIMIT_S = LOADED_MACHINE_S


@dataclasses.dataclass
class Served:
    """A running reference server and its MCP endpoint."""

    server: LongcallServer
    url: str

    async def wait_status(self, task_id: str, statuses: Iterable[str]) -> str:
        """Wait (bounded, on the server's change events) until the task has a status."""
        wanted = set(statuses)
        manager = self.server.manager
        with anyio.fail_after(WAIT_LIMIT_S):
            while True:
                with manager.hub.watch(task_id) as changed:
                    record = await manager.store.get(task_id)
                    assert record is not None, task_id
                    if record.status.value in wanted:
                        return record.status.value
                    await changed.wait()


@pytest.fixture
async def served(tmp_path: Path) -> AsyncIterator[Served]:
    """The reference server (five example tools) on a free port."""
    server = build_reference_server(store=str(tmp_path / "tasks.db"))
    async with running_server(server) as url:
        yield Served(server=server, url=url)


@pytest.fixture
async def lossy(tmp_path: Path) -> AsyncIterator[Served]:
    """The reference server losing the HTTP response of its first task creation."""
    server = build_reference_server(store=str(tmp_path / "lossy.db"))
    async with running_server(server, wrap=LoseCreateResponse) as url:
        yield Served(server=server, url=url)


_NODES = itertools.count(1)


class Driver:
    """Feeds adapter outcomes through the real machine, so every event is also checked
    against the transition table (an event the core refuses fails the test)."""

    def __init__(self, adapter: Adapter, binding: ToolBinding, arguments: dict[str, object]):
        self.adapter = adapter
        self.binding = binding
        self.arguments = arguments
        self.now = 1000.0
        node = f"node-{next(_NODES)}"
        self.record: OperationRecord = new_operation(
            call_node_id=node,
            request_digest=request_digest(binding.tool_name, arguments),
            tool_name=binding.tool_name,
            tool_descriptor_digest=binding.descriptor_digest,
            principal="anonymous",
            server=binding.server,
            protocol=binding.protocol,
            adapter_version=binding.adapter_version,
            now=self.now,
            submission_lookup=binding.submission_lookup,
            tool_idempotent=binding.idempotent,
        ).record

    def apply(self, outcome: Outcome | Event) -> OperationRecord:
        event = outcome.event if isinstance(outcome, Outcome) else outcome
        event = dataclasses.replace(event, execution_epoch=self.record.execution_epoch)
        self.now += 1.0
        self.record = handle(self.record, event, now=self.now, jitter=0.5).record
        return self.record

    async def submit(self) -> Outcome:
        outcome = await self.adapter.submit(self.record, self.arguments)
        self.apply(outcome)
        return outcome

    async def poll(self) -> Outcome:
        outcome = await self.adapter.poll(self.record)
        self.apply(outcome)
        return outcome

    async def fetch(self) -> Outcome:
        self.apply(ResultFetchStarted())
        outcome = await self.adapter.fetch_result(self.record)
        self.apply(outcome)
        return outcome
