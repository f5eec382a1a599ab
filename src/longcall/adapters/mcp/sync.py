"""P5: plain synchronous MCP tools (X10), client side, at either protocol version — the
pure mapping.

Owns: one ``tools/call`` under a request timeout (default 15 s, or the tool's declared
limit) whose reply is the outcome itself (an inline ``ResultFetched``), and the X1
refusal (:class:`~longcall.errors.TaskSupportMissing`) of a call declared long at a
server or tool without task support. Must not: perform I/O, send ``params.task`` or
any ``tasks/*`` request, consent to the tasks extension, or wrap a seconds-long tool
in an async shell.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from longcall.adapters.base import Outcome, ToolBinding
from longcall.adapters.exchange import DEFAULT_TIMEOUT_S, Exchange, TransportFailure, settled
from longcall.adapters.mcp import modern
from longcall.adapters.mcp.common import submit_failure, with_progress
from longcall.adapters.mcp.results import verify_result
from longcall.adapters.mcp.rpc import MODERN, RpcChannel, call
from longcall.adapters.mcp.tools import (
    declared_sync_timeout_s,
    listed_tool,
    listed_tools,
    param_headers,
    task_support_of,
    tool_binding,
)
from longcall.adapters.outcomes import unsupported
from longcall.core.events import SubmitOutcomeLost
from longcall.core.record import OperationRecord
from longcall.core.retry import RequestKind
from longcall.errors import AdapterError, TaskSupportMissing

ADAPTER_VERSION = "1"


class SyncMapping:
    """Synchronous ``tools/call`` at one server, framed by ``channel``'s protocol version.

    ``long_call=True`` says the caller expects minutes: without task support that is
    refused at :meth:`bind` instead of being cut off by a timeout later (X1).
    """

    version = ADAPTER_VERSION

    def __init__(
        self,
        url: str,
        *,
        channel: RpcChannel,
        timeout_s: float = DEFAULT_TIMEOUT_S,
        long_call: bool = False,
    ) -> None:
        self.url = url
        self.channel = channel
        # "<version>/sync": the version frames the call, the suffix says no tasks (P5).
        self.protocol = f"{channel.dialect.version}/sync"
        self.timeout_s = timeout_s
        self.long_call = long_call
        self.bindings: dict[str, ToolBinding] = {}

    def tools(self) -> Exchange[list[dict[str, Any]]]:
        """Every tool the server lists; without tasks here, none is called as one."""
        meta = self.channel.dialect.meta("tools/list", consent=False)
        return (yield from listed_tools(self.channel, meta, "forbidden", url=self.url))

    def bind(self, tool_name: str) -> Exchange[ToolBinding]:
        meta = self.channel.dialect.meta("tools/list", consent=False)
        tool = yield from listed_tool(self.channel, meta, tool_name, url=self.url)
        version = self.channel.dialect.version
        if task_support_of(tool) == "required":
            raise TaskSupportMissing(
                f"tool {tool_name!r} requires tasks, but {self.url} does not offer task"
                f" support at protocol {version} to this client"
            )
        declared = declared_sync_timeout_s(tool)
        if self.long_call and declared is None:
            raise TaskSupportMissing(
                f"the call of {tool_name!r} is declared long, but {self.url} supports no"
                " tasks for it and the tool declares no synchronous limit"
            )
        binding = tool_binding(
            self.url,
            tool_name,
            tool,
            protocol=self.protocol,
            adapter_version=ADAPTER_VERSION,
            task_support="forbidden",
            submission_lookup=False,
            sync_timeout_s=declared or self.timeout_s,
        )
        self.bindings[tool_name] = binding
        return binding

    def submit(self, record: OperationRecord, arguments: Mapping[str, Any]) -> Exchange[Outcome]:
        binding = self.bindings.get(record.tool_name)
        if binding is None:
            try:
                binding = yield from self.bind(record.tool_name)
            except AdapterError as exc:
                return Outcome(
                    event=SubmitOutcomeLost(reason=f"could not describe the tool: {exc}")
                )
        meta = {**self.channel.dialect.meta("tools/call", consent=False)}
        meta["progressToken"] = record.call_node_id
        params = {"name": record.tool_name, "arguments": dict(arguments), "_meta": meta}
        headers = self.channel.dialect.headers("tools/call", record.tool_name)
        if self.channel.dialect.version == MODERN:
            headers.update(param_headers(binding.header_params, arguments))  # SEP-2243
        answer = yield from call(
            self.channel,
            "tools/call",
            params,
            name=record.tool_name,
            headers=headers,
            timeout_s=binding.sync_timeout_s or self.timeout_s,
        )
        if isinstance(answer, TransportFailure) or answer.error is not None:
            # X10: a timeout is ambiguous (the tool may have run): SubmitOutcomeLost.
            return submit_failure(
                answer,
                failures=modern.JSONRPC_FAILURES,
                rejecting_codes=modern.REJECTING_CODES,
            )
        result = answer.result or {}
        if result.get("resultType") not in (None, "complete") or "task" in result:
            return Outcome(
                event=SubmitOutcomeLost(reason="a task came back to a call that asked for none")
            )
        outcome = verify_result(result, output_schema=binding.output_schema)
        return with_progress(outcome, answer.messages)

    def _no_operation(self, request: RequestKind) -> Exchange[Outcome]:
        return settled(
            unsupported(request, "a synchronous call has no remote operation to ask about")
        )

    def lookup(self, record: OperationRecord) -> Exchange[Outcome]:
        return self._no_operation(RequestKind.LOOKUP)

    def poll(self, record: OperationRecord) -> Exchange[Outcome]:
        return self._no_operation(RequestKind.POLL)

    def fetch_result(self, record: OperationRecord) -> Exchange[Outcome]:
        return self._no_operation(RequestKind.FETCH)

    def cancel(self, record: OperationRecord) -> Exchange[Outcome]:
        return self._no_operation(RequestKind.CANCEL)

    def send_input(
        self, record: OperationRecord, answers: Mapping[str, Any]
    ) -> Exchange[Outcome | None]:
        return self._no_operation(RequestKind.INPUT)


__all__ = ["ADAPTER_VERSION", "SyncMapping"]
