"""The thin I/O shell around a pure protocol mapping: an :class:`Adapter` for the runtime.

Owns: :class:`ProtocolMapping`, what every protocol's pure mapping offers (one exchange
per adapter operation), and :class:`MappedAdapter`, which runs those exchanges through
an :class:`~longcall.adapters.http.HttpDriver`. The executor talks to the adapter; the
simulator runs the same mapping's exchanges over its simulated network. So the wire ⇄
event mapping exists once, and both callers run it (F1–F3).

Must not: read a reply or decide an event (the mapping does), or hold state of its own
beyond the driver.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol

from longcall.adapters.base import Adapter, Outcome, ProgressSink, ToolBinding
from longcall.adapters.exchange import Exchange
from longcall.adapters.http import EventObserver, HttpDriver
from longcall.core import OperationRecord
from longcall.errors import AdapterError, ToolNotAllowed


class ProtocolMapping(Protocol):
    """One protocol version's pure mapping at one server (see ``adapters/mcp/modern.py``)."""

    protocol: str
    version: str

    def bind(self, tool_name: str) -> Exchange[ToolBinding]: ...

    def submit(
        self, record: OperationRecord, arguments: Mapping[str, Any]
    ) -> Exchange[Outcome]: ...

    def lookup(self, record: OperationRecord) -> Exchange[Outcome]: ...

    def poll(self, record: OperationRecord) -> Exchange[Outcome]: ...

    def fetch_result(self, record: OperationRecord) -> Exchange[Outcome]: ...

    def cancel(self, record: OperationRecord) -> Exchange[Outcome]: ...

    def send_input(
        self, record: OperationRecord, answers: Mapping[str, Any]
    ) -> Exchange[Outcome | None]: ...


class MappedAdapter(Adapter):
    """An adapter that is nothing but a mapping run over HTTP."""

    def __init__(
        self,
        mapping: ProtocolMapping,
        driver: HttpDriver,
        *,
        progress: ProgressSink | None = None,
    ) -> None:
        self.mapping = mapping
        self.driver = driver
        self.progress = progress
        self.protocol = mapping.protocol
        self.version = mapping.version
        self.allowed_tools: frozenset[str] | None = None
        """The tools this caller may call at this server (C1); None: all it lists."""

    def observer(self, record: OperationRecord) -> EventObserver | None:
        """What sees a request's stream events as they arrive (none by default)."""
        return None

    async def _run(self, exchange: Exchange[Any], record: OperationRecord | None = None) -> Any:
        observer = self.observer(record) if record is not None else None
        return await self.driver.run(exchange, on_event=observer)

    async def bind(self, tool_name: str) -> ToolBinding:
        if self.allowed_tools is not None and tool_name not in self.allowed_tools:
            raise ToolNotAllowed(
                f"tool {tool_name!r} is not among the tools allowed at this server "
                f"({', '.join(sorted(self.allowed_tools)) or 'none'})"
            )
        binding: ToolBinding = await self._run(self.mapping.bind(tool_name))
        return binding

    def forget_listing(self, tool_name: str) -> None:
        forget = getattr(self.mapping, "forget_listing", None)
        if forget is not None:
            forget(tool_name)

    async def tools(self) -> list[dict[str, Any]]:
        listing = getattr(self.mapping, "tools", None)
        if listing is None:
            return await super().tools()
        tools: list[dict[str, Any]] = await self._run(listing())
        allowed = self.allowed_tools
        return [t for t in tools if allowed is None or t.get("name") in allowed]

    async def list_tools(self) -> list[dict[str, Any]]:
        """Every tool listed at an MCP-framed server (``tools/list``, paginated), less
        the ones this caller may not call (C1)."""
        from longcall.adapters.mcp.tools import describe_failure, list_tools

        channel = getattr(self.mapping, "channel", None)
        if channel is None:
            return await super().list_tools()
        meta = (
            channel.dialect.meta("tools/list", consent=not self.protocol.endswith("/sync")) or None
        )
        listed = await self._run(list_tools(channel, meta))
        if not isinstance(listed, list):
            raise AdapterError(f"tools/list failed: {describe_failure(listed)}")
        return [
            tool
            for tool in listed
            if self.allowed_tools is None or tool.get("name") in self.allowed_tools
        ]

    async def submit(self, record: OperationRecord, arguments: Mapping[str, Any]) -> Outcome:
        outcome: Outcome = await self._run(self.mapping.submit(record, arguments), record)
        return outcome

    async def lookup(self, record: OperationRecord) -> Outcome:
        outcome: Outcome = await self._run(self.mapping.lookup(record), record)
        return outcome

    async def poll(self, record: OperationRecord) -> Outcome:
        outcome: Outcome = await self._run(self.mapping.poll(record), record)
        return outcome

    async def fetch_result(self, record: OperationRecord) -> Outcome:
        outcome: Outcome = await self._run(self.mapping.fetch_result(record), record)
        return outcome

    def holds_result(self, record: OperationRecord) -> bool:
        holds = getattr(self.mapping, "holds_result", None)
        return holds is not None and bool(holds(record))

    async def cancel(self, record: OperationRecord) -> Outcome:
        outcome: Outcome = await self._run(self.mapping.cancel(record), record)
        return outcome

    async def send_input(
        self, record: OperationRecord, answers: Mapping[str, Any]
    ) -> Outcome | None:
        outcome: Outcome | None = await self._run(self.mapping.send_input(record, answers), record)
        return outcome

    async def aclose(self) -> None:
        await self.driver.aclose()


__all__ = ["MappedAdapter", "ProtocolMapping"]
