"""``LongcallTasks``: FastMCP's ``io.modelcontextprotocol/tasks`` extension on longcall's store.

Owns: the FastMCP ``ServerExtension`` seam — the tasks capability, ``tasks/get``,
``tasks/update`` and ``tasks/cancel`` (``methods()``), the decision to run a
``tools/call`` as a task and the durable creation (``intercept_tool_call()``), and the
store, task manager and lease keeper that live as long as the server
(``lifespan()``) — plus the companion ``dev.longcall/submissionKey`` extension (its
advertisement with the store's id, and ``longcall/tasks/lookup``). Who a task belongs to
is FastMCP's authenticated caller. Must not: run or store tasks itself (longcall's
``TaskManager`` and ``TaskStore`` do, exactly as for ``longcall serve``), nor render task
shapes (``longcall.server.modern`` does).
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import AsyncIterator, Mapping, Sequence
from datetime import timedelta
from typing import Any

import mcp_types
from fastmcp.exceptions import NotFoundError
from fastmcp.exceptions import ToolError as FastMCPToolError
from fastmcp.server.context import Context
from fastmcp.server.dependencies import get_access_token, get_http_request
from fastmcp.server.extensions import (
    MethodBinding,
    ServerExtension,
    ToolCallContinuation,
    ToolCallOutcome,
)
from fastmcp.tools.base import Tool
from mcp.server.context import ServerRequestContext
from mcp.shared.exceptions import MCPError
from mcp.shared.inbound import MCP_NAME_HEADER, decode_header_value
from mcp_types.version import MODERN_PROTOCOL_VERSIONS
from pydantic import ConfigDict, RootModel

from longcall.integrations.fastmcp import _seams
from longcall.integrations.fastmcp.running import tool_spec
from longcall.server.errors import (
    HEADER_MISMATCH,
    INTERNAL_ERROR,
    JsonRpcError,
    StoreUnavailable,
)
from longcall.server.model import ANONYMOUS, Principal, ProtocolVersion
from longcall.server.modern import (
    ModernProtocol,
    declares_elicitation,
    missing_tasks_capability,
    task_fields,
)
from longcall.server.options import ServerOptions
from longcall.server.store import SqlTaskStore, open_store
from longcall.server.tasks import TaskManager
from longcall.server.tools import DEFAULT_TTL_MS, ToolRegistry, ToolSpec
from longcall.server.wire import (
    LOOKUP_METHOD,
    SUBMISSION_KEY_EXTENSION,
    TASKS_EXTENSION,
    RpcRequest,
    submission_key,
    submission_key_capability,
)

DEFAULT_STORE = "sqlite:///tasks.db"
_TASK_METHODS = ("tasks/get", "tasks/update", "tasks/cancel")
_MODERN = frozenset(MODERN_PROTOCOL_VERSIONS)


class _Params(mcp_types.RequestParams):
    """Any params object: longcall's protocol code reads the raw params itself."""

    model_config = ConfigDict(extra="allow")


class _WireResult(RootModel[dict[str, Any]]):
    """A result dict handed to the SDK as is (``ttlMs: null`` stays on the wire)."""


def caller_principal() -> Principal:
    """Who is calling, from FastMCP's auth: ``client_id|sub`` (as fastmcp-tasks scopes
    tasks), else the client id; no token is the one anonymous principal."""
    token = get_access_token()
    if token is None:
        return ANONYMOUS
    subject = token.claims.get("sub") if token.claims else None
    scope = f"{token.client_id}|{subject}" if subject else token.client_id
    return Principal(subject=f"fastmcp:{scope}")


def _ttl_ms(ttl: timedelta | None) -> int | None:
    if ttl is None:
        return None
    milliseconds = int(ttl.total_seconds() * 1000)
    if milliseconds <= 0:
        raise ValueError("ttl must be positive (or None for tasks that never expire)")
    return milliseconds


def _as_mcp_error(exc: JsonRpcError) -> MCPError:
    return MCPError(code=exc.code, message=exc.message, data=exc.data)


class LongcallTasks(ServerExtension):
    """Durable MCP tasks for a FastMCP server, on longcall's SQLite or PostgreSQL store.

    ``mcp.add_extension(LongcallTasks(store="sqlite:///tasks.db"))`` in place of
    ``TasksExtension(...)``; tools keep ``task=True`` / ``TaskConfig(mode=...)``.

    * ``store``: ``sqlite:///PATH`` or ``postgresql://…[?schema=name]`` (several server
      processes on one PostgreSQL store share its tasks; each task runs in one).
    * ``ttl``: how long a task stays answerable after its creation (``None``: forever).
    * ``options``: longcall's server limits (lease length, open tasks per principal,
      argument and result sizes).
    """

    identifier = TASKS_EXTENSION

    def __init__(
        self,
        store: str = DEFAULT_STORE,
        *,
        ttl: timedelta | None = timedelta(milliseconds=DEFAULT_TTL_MS),
        options: ServerOptions | None = None,
    ) -> None:
        self._store_url = store
        self._ttl_ms = _ttl_ms(ttl)
        self._options = options or ServerOptions()
        self._store: SqlTaskStore | None = None
        self._manager: TaskManager | None = None
        self._protocol: ModernProtocol | None = None
        self._companion: SubmissionKeys | None = None

    # ---- what the server advertises and serves ------------------------------------------------

    def settings(self) -> dict[str, Any]:
        return {}

    def methods(self) -> Sequence[MethodBinding]:
        if self._companion is None:
            # Registered with this one (add_extension is FastMCP's public seam), so the
            # one-line swap also advertises the submission key and serves its lookup.
            self._companion = SubmissionKeys(self)
            self.server.add_extension(self._companion)
        return [
            MethodBinding(
                method=method,
                params_type=_Params,
                handler=self._task_method(method),
                protocol_versions=_MODERN,
            )
            for method in _TASK_METHODS
        ]

    @property
    def manager(self) -> TaskManager:
        """The running task manager (only while the server's lifespan is entered)."""
        if self._manager is None:
            raise RuntimeError("LongcallTasks is not running: the server's lifespan is not entered")
        return self._manager

    @property
    def store_id(self) -> str:
        """The identity of the durable store tasks are created in."""
        return self.manager.store.store_id

    def _task_method(self, method: str) -> Any:
        async def handle(ctx: ServerRequestContext[Any, Any], params: _Params) -> dict[str, Any]:
            raw = dict(ctx.params) if isinstance(ctx.params, Mapping) else {}
            _check_mcp_name(raw)
            return await self.answer(ctx, method, raw)

        return handle

    async def answer(
        self, ctx: ServerRequestContext[Any, Any], method: str, params: dict[str, Any]
    ) -> dict[str, Any]:
        """One request answered by longcall's 2026-07-28 protocol code."""
        protocol = self._protocol
        if protocol is None:
            raise MCPError(code=INTERNAL_ERROR, message="the task store is not open")
        request = RpcRequest(
            id=ctx.request_id,
            method=method,
            params=params,
            headers={},
            principal=caller_principal(),
            accepts_event_stream=False,
        )
        try:
            reply = await protocol.handle(request)
        except JsonRpcError as exc:
            raise _as_mcp_error(exc) from exc
        except StoreUnavailable as exc:
            raise MCPError(code=INTERNAL_ERROR, message=f"task store unavailable: {exc}") from exc
        result = getattr(reply, "result", None)
        assert isinstance(result, dict)
        return result

    # ---- tools/call ---------------------------------------------------------------------------

    async def intercept_tool_call(
        self,
        params: mcp_types.CallToolRequestParams,
        context: Context,
        call_next: ToolCallContinuation,
    ) -> ToolCallOutcome:
        """Run the call as a task when the tool's mode and the client's consent say so.

        The same decision as fastmcp-tasks: ``required`` always (-32021 without consent),
        ``optional`` with this request's consent, ``forbidden`` never; a tool that a tool
        body or middleware calls runs inline.
        """
        try:
            tool = await context.fastmcp.get_tool(params.name)
        except NotFoundError:
            tool = None
        if tool is None or not tool.task_config.supports_tasks():
            return await call_next()
        mode = tool.task_config.mode
        if not _seams.is_client_tool_call():
            if mode == "required":
                raise FastMCPToolError(
                    f"Tool {tool.name!r} only runs as a background task, which the client"
                    " has to request by calling it directly."
                )
            return await call_next()
        request = context.request_context
        modern = request is not None and request.protocol_version in _MODERN
        consent = modern and context.client_extension_settings(TASKS_EXTENSION) is not None
        if mode == "required" and not consent:
            raise _as_mcp_error(missing_tasks_capability(f"Tool {tool.name!r}"))
        if not consent:
            return await call_next()
        meta = dict(request.meta or {}) if request is not None else {}
        return await self._create(tool, dict(params.arguments or {}), meta)

    async def _create(
        self, tool: Tool, arguments: dict[str, Any], meta: dict[str, Any]
    ) -> _WireResult:
        manager = self.manager
        spec = self._spec(tool)
        envelope = {"_meta": meta}
        try:
            outcome = await manager.create(
                principal=caller_principal(),
                spec=spec,
                arguments=arguments,
                protocol=ProtocolVersion.MODERN,
                submission_key=submission_key(envelope),
                ttl_ms=self._ttl_ms,
                client_can_elicit=declares_elicitation(envelope),
            )
        except JsonRpcError as exc:
            raise _as_mcp_error(exc) from exc
        except StoreUnavailable as exc:
            raise MCPError(code=INTERNAL_ERROR, message=f"task store unavailable: {exc}") from exc
        return _WireResult({**task_fields(outcome.record), "resultType": "task"})

    def _spec(self, tool: Tool) -> ToolSpec:
        """The task manager's spec of this tool (a tool added after startup is added now)."""
        registry = self.manager.registry
        spec = registry.get(tool.name)
        if spec is None:
            spec = tool_spec(self.server, tool)
            registry.add(spec)
        return spec

    # ---- lifespan -----------------------------------------------------------------------------

    @contextlib.asynccontextmanager
    async def lifespan(self) -> AsyncIterator[None]:
        """Open the store, take over tasks nobody runs (restart), keep leases; then close."""
        with _seams.entered():
            store = open_store(self._store_url)
            try:
                registry = ToolRegistry()
                for component in await self.server.get_tasks():
                    if isinstance(component, Tool) and registry.get(component.name) is None:
                        registry.add(tool_spec(self.server, component))
                manager = TaskManager(
                    store=store, registry=registry, clock=time.time, options=self._options
                )
                self._store, self._manager = store, manager
                self._protocol = ModernProtocol(manager=manager, options=self._options)
                await manager.start()
                try:
                    yield
                finally:
                    await manager.stop()
            finally:
                self._store = self._manager = self._protocol = None
                store.close()


class SubmissionKeys(ServerExtension):
    """``dev.longcall/submissionKey``: idempotent creation by key, and the lookup by key.

    Registered by :class:`LongcallTasks` itself; advertises ``lookupMethod`` and the
    store's ``storeId`` so a longcall caller whose create response was lost gets its task
    back (``longcall/tasks/lookup``) instead of running the tool twice.
    """

    identifier = SUBMISSION_KEY_EXTENSION

    def __init__(self, tasks: LongcallTasks) -> None:
        self._tasks = tasks

    def settings(self) -> dict[str, Any]:
        manager = self._tasks._manager
        if manager is None:
            return {"lookupMethod": LOOKUP_METHOD}
        return submission_key_capability(manager.store.store_id)

    def methods(self) -> Sequence[MethodBinding]:
        async def lookup(ctx: ServerRequestContext[Any, Any], params: _Params) -> dict[str, Any]:
            raw = dict(ctx.params) if isinstance(ctx.params, Mapping) else {}
            return await self._tasks.answer(ctx, LOOKUP_METHOD, raw)

        return [MethodBinding(method=LOOKUP_METHOD, params_type=_Params, handler=lookup)]


def _check_mcp_name(params: Mapping[str, Any]) -> None:
    """An ``Mcp-Name`` header, when sent, must name the body's ``taskId`` (SEP-2663).

    A missing header is accepted, as fastmcp-tasks accepts it: FastMCP's own client
    never sends one.
    """
    try:
        headers = get_http_request().headers
    except RuntimeError:
        return  # not HTTP: no routing headers
    header = headers.get(MCP_NAME_HEADER)
    if header is not None and decode_header_value(header) != params.get("taskId"):
        raise MCPError(
            code=HEADER_MISMATCH,
            message="Mcp-Name header does not match the request body's 'taskId' parameter",
        )
