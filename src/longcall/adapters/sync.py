"""P5: plain synchronous MCP tools (X10), client side, at either protocol version.

Owns: one ``tools/call`` under a request timeout (default 15 s, or the tool's declared
limit) whose reply is the outcome itself (an inline ``ResultFetched``), and the X1
refusal (:class:`TaskSupportMissing`) of a call declared long at a server or tool
without task support. Must not: send ``params.task`` or any ``tasks/*`` request,
consent to the tasks extension, or wrap a seconds-long tool in an async shell.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from longcall.adapters.base import (
    Adapter,
    AdapterError,
    Outcome,
    ProgressSink,
    TaskSupportMissing,
    ToolBinding,
)
from longcall.adapters.mcp_common import (
    DEFAULT_REQUEST_TIMEOUT_S,
    Dialect,
    RpcSession,
    WireFailure,
    declared_sync_timeout_s,
    listed_tool,
    progress_hook,
    raw_failure_detail,
    task_support_of,
    tool_binding,
    verify_result,
    with_progress,
)
from longcall.adapters.mcp_tasks_2026_07_28 import request_failed, submit_failure
from longcall.core.events import SubmitOutcomeLost
from longcall.core.record import OperationRecord
from longcall.core.retry import FailureKind, RequestKind

ADAPTER_VERSION = "1"


class SyncAdapter(Adapter):
    """Synchronous ``tools/call`` at one server, framed by ``dialect``'s protocol version.

    ``long_call=True`` says the caller expects minutes: without task support that is
    refused at :meth:`bind` instead of being cut off by a timeout later (X1).
    """

    version = ADAPTER_VERSION

    def __init__(
        self,
        session: RpcSession,
        *,
        dialect: Dialect,
        timeout_s: float = DEFAULT_REQUEST_TIMEOUT_S,
        long_call: bool = False,
        progress: ProgressSink | None = None,
    ) -> None:
        self.session = session
        self.dialect = dialect
        # "<version>/sync": the version frames the call, the suffix says no tasks (P5).
        self.protocol = f"{dialect.version}/sync"
        self.timeout_s = timeout_s
        self.long_call = long_call
        self.progress = progress
        self._bindings: dict[str, ToolBinding] = {}

    async def bind(self, tool_name: str) -> ToolBinding:
        tool = await listed_tool(
            self.session, self.dialect, tool_name, consent=False, describe=raw_failure_detail
        )
        if task_support_of(tool) == "required":
            raise TaskSupportMissing(
                f"tool {tool_name!r} requires tasks, but {self.session.url} does not offer task"
                f" support at protocol {self.dialect.version} to this client"
            )
        declared = declared_sync_timeout_s(tool)
        if self.long_call and declared is None:
            raise TaskSupportMissing(
                f"the call of {tool_name!r} is declared long, but {self.session.url} supports"
                " no tasks for it and the tool declares no synchronous limit (X1)"
            )
        binding = tool_binding(
            self.session.url,
            tool_name,
            tool,
            protocol=self.protocol,
            adapter_version=ADAPTER_VERSION,
            task_support="forbidden",
            submission_lookup=False,
            sync_timeout_s=declared or self.timeout_s,
        )
        self._bindings[tool_name] = binding
        return binding

    async def submit(self, record: OperationRecord, arguments: Mapping[str, Any]) -> Outcome:
        binding = self._bindings.get(record.tool_name)
        if binding is None:
            try:
                binding = await self.bind(record.tool_name)
            except AdapterError as exc:
                return Outcome(
                    event=SubmitOutcomeLost(reason=f"could not describe the tool: {exc}")
                )
        meta = {**self.dialect.meta("tools/call", consent=False)}
        meta["progressToken"] = record.call_node_id
        params = {"name": record.tool_name, "arguments": dict(arguments), "_meta": meta}
        seen: list[float] = []
        answer = await self.session.request(
            "tools/call",
            params,
            headers=self.dialect.headers("tools/call", record.tool_name),
            timeout_s=binding.sync_timeout_s or self.timeout_s,
            on_message=progress_hook(self.progress, record.call_node_id, seen),
        )
        if isinstance(answer, WireFailure) or answer.error is not None:
            # X10: a timeout is ambiguous (the tool may have run): SubmitOutcomeLost.
            return submit_failure(answer)
        result = answer.result or {}
        if result.get("resultType") not in (None, "complete") or "task" in result:
            return Outcome(
                event=SubmitOutcomeLost(reason="a task came back to a call that asked for none")
            )
        outcome = verify_result(result, output_schema=binding.output_schema)
        return with_progress(outcome, seen)

    async def _no_operation(self, request: RequestKind) -> Outcome:
        return request_failed(
            request,
            WireFailure(
                kind=FailureKind.BAD_REQUEST,
                detail="a synchronous call has no remote operation to ask about",
                processed_possible=False,
            ),
        )

    async def lookup(self, record: OperationRecord) -> Outcome:
        return await self._no_operation(RequestKind.LOOKUP)

    async def poll(self, record: OperationRecord) -> Outcome:
        return await self._no_operation(RequestKind.POLL)

    async def fetch_result(self, record: OperationRecord) -> Outcome:
        return await self._no_operation(RequestKind.FETCH)

    async def cancel(self, record: OperationRecord) -> Outcome:
        return await self._no_operation(RequestKind.CANCEL)

    async def send_input(
        self, record: OperationRecord, answers: Mapping[str, Any]
    ) -> Outcome | None:
        return await self._no_operation(RequestKind.INPUT)

    async def aclose(self) -> None:
        await self.session.aclose()
