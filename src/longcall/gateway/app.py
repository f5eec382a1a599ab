"""The gateway: an MCP server whose tools are other servers' tools, made durable (G1, O4).

Owns: :class:`Gateway` — a :class:`~longcall.server.LongcallServer` above (so hosts get
its front door, auth, both task protocols and its task store) and one
:class:`~longcall.client.Client` below (so every host call is an operation in the
gateway's own ledger, driven by the durable executor); the host-call path (the call
node a host call resolves to, early return within the window, tasks for task-aware
hosts, progress forwarded, input passed on, cancel); the four gateway tools
(``longcall_status``, ``longcall_result``, ``longcall_cancel``, ``longcall_answer``);
handles bound to principals with the recent ones as the way back; the metrics.

Must not: speak a protocol to an upstream (the client's adapters do), decide a call's
state (the engine does), or hold reply wording (``replies``) or the handle format
(``handles``).

The decisions about a host call are pure and live in ``hostcalls`` (the simulator's
host world runs the same functions): the rule for "the same call" (docs/design/gateway.md,
``repeats``) — a host call is (principal, tool, canonical arguments); its call node is
derived from that and a repeat counter, and :func:`~longcall.gateway.repeats.joins` says
whether it attaches to an earlier node or is a deliberate repeat (the counter goes up,
the upstream runs again) —, how long each call waits, what it is answered, the delivery
marks, and the node a handle names. This module does the I/O around them.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import dataclasses
import json
import logging
import time
from collections.abc import AsyncIterator, Callable, Mapping
from typing import Any, NoReturn

import pydantic

from longcall.adapters.servers import ServersConfig
from longcall.client import CallOutcome, CallResult, Client, Progress
from longcall.core.keys import digest_json
from longcall.errors import (
    DuplicateCallNode,
    HandleRefused,
    InvalidAnswer,
    LongcallError,
    NotWaitingForInput,
)
from longcall.gateway.handles import HostCall, handle_of_node, node_prefix, owned_by
from longcall.gateway.hostcalls import (
    Answer,
    GatewayOptions,
    Start,
    answer_for,
    early_wait_s,
    mark_delivered,
    note_start,
    note_stop,
    owned_node,
    resolve_call,
    status_wait_s,
)
from longcall.gateway.metrics import GatewayMetrics
from longcall.gateway.pages import page_count
from longcall.gateway.replies import (
    ANSWER_TOOL,
    CANCEL_TOOL,
    GATEWAY_TOOLS,
    RESULT_TOOL,
    STATUS_TOOL,
    cancel_reply,
    outcome_reply,
    refused_text,
    result_body,
    state_word,
    status_reply,
)
from longcall.gateway.upstreams import UpstreamTool, name_tools
from longcall.ledger import Ledger
from longcall.runtime.inputs import REQUEST_BLOB_PREFIX
from longcall.runtime.leases import LeasePolicy
from longcall.server import LongcallServer, ServerOptions, TaskContext, ToolError, token_principal
from longcall.server.app import running_server
from longcall.server.auth import Authenticator
from longcall.server.errors import InvalidParams
from longcall.server.model import ANONYMOUS, TaskStatus
from longcall.server.tools import ToolSpec, build_tool_spec

log = logging.getLogger("longcall.gateway")

LIST_TIMEOUT_S = 15.0
LIST_RETRY_S = (1.0, 30.0)
CANCEL_CONFIRM_S = 5.0
"""How long ``longcall_cancel`` waits for the upstream's terminal before saying
"requested, not confirmed"."""


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class _ServedTool(ToolSpec):
    """An upstream tool served by the gateway: its arguments go on as given (the upstream
    checks them), and its descriptor is the upstream's."""

    served: Mapping[str, Any] = dataclasses.field(default_factory=dict)

    def validate_arguments(self, arguments: Any) -> dict[str, Any]:
        if not isinstance(arguments, dict):
            raise InvalidParams(f"arguments of tool {self.name!r} must be an object")
        return {"arguments": dict(arguments)}

    def tool_definition(self, *, with_execution: bool) -> dict[str, Any]:
        definition = dict(self.served)
        if with_execution:
            definition["execution"] = {"taskSupport": self.task_support}
        return definition


class _NoArguments(pydantic.BaseModel):
    """Placeholder: a served tool's arguments are the upstream's to check."""


class Gateway:
    """``async with Gateway(servers=…) as gateway:`` lists the upstreams' tools, serves
    them with the gateway tools on ``gateway.server``, and drives every host call."""

    def __init__(
        self,
        *,
        servers: ServersConfig,
        ledger: str | Ledger | None = None,
        task_store: str | None = None,
        options: GatewayOptions | None = None,
        server_options: ServerOptions | None = None,
        authenticator: Authenticator = token_principal,
        lease_s: float | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.options = options or GatewayOptions()
        self.servers = servers
        self._clock = clock
        self._lease = LeasePolicy.of(lease_s) if lease_s is not None else LeasePolicy()
        self._up = False
        self.client = Client(
            ledger, servers=servers, drive_all=True, lease_s=lease_s, on_progress=self._progress
        )
        self.server = LongcallServer(
            store=task_store, options=server_options, authenticator=authenticator
        )
        self.metrics = GatewayMetrics(clock=clock, open_handles=self._open_handles)
        self.tools: dict[str, UpstreamTool] = {}
        self._listed: dict[str, tuple[str, str | None, list[dict[str, Any]]]] = {}
        self._recent: dict[str, collections.deque[tuple[str, str]]] = {}
        self._locks: dict[HostCall, asyncio.Lock] = {}
        self._listeners: dict[str, set[TaskContext]] = {}
        self._fractions: dict[str, float] = {}
        self._lister: asyncio.Task[None] | None = None
        self._register_gateway_tools()

    # --- life -------------------------------------------------------------------------

    async def __aenter__(self) -> Gateway:
        # Before the Client renews or claims anything: the worker rows still say when
        # the last gateway process of this ledger was alive.
        try:
            await asyncio.to_thread(self._note_start)
        except BaseException:
            self.client.close()
            raise
        await self.client.__aenter__()
        self._up = True
        try:
            missing = await self.list_upstreams()
            if missing:
                self._lister = asyncio.create_task(self._list_until_all(missing))
        except BaseException:
            await self.client.aclose()
            raise
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Stop driving (host calls go on at the upstreams and resume at the next start)."""
        if self._lister is not None:
            self._lister.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._lister
        self.metrics.close()
        if self._up:
            self._up = False
            try:
                await asyncio.to_thread(self._note_stop)
            except LongcallError as exc:  # unrecorded: the next start reads the lease rows
                log.warning("could not record the gateway's stop: %s", exc)
        await self.client.aclose()

    def _note_start(self) -> None:
        downtime = note_start(
            self.client.ledger,
            now=self._clock(),
            lease_s=self._lease.lease_s,
            heartbeat_s=self._lease.renew_every_s,
            options=self.options,
        )
        if downtime is not None:
            began, ended = downtime
            log.info("no gateway was up for %.0f s: not counted in repeat windows", ended - began)

    def _note_stop(self) -> None:
        note_stop(self.client.ledger, now=self._clock())

    async def list_upstreams(self, names: list[str] | None = None) -> list[str]:
        """List the upstreams' tools and serve the ones not served yet; returns the
        upstreams that could not be listed (tried again in the background)."""
        missing: list[str] = []
        for name, config in self.servers.servers.items():
            if names is not None and name not in names:
                continue
            try:
                async with asyncio.timeout(LIST_TIMEOUT_S):
                    listed = await self.client.executor.list_tools(
                        config.url, protocol=config.protocol
                    )
            except Exception as exc:  # an upstream down at start: its tools come later
                log.warning("could not list the tools of %s: %s", name, exc)
                missing.append(name)
                continue
            self._listed[name] = (config.url, config.protocol, listed)
        for tool in name_tools(self._listed, GATEWAY_TOOLS):
            if tool.exposed not in self.tools and self.server.registry.get(tool.exposed) is None:
                self._serve(tool)
        return missing

    async def _list_until_all(self, missing: list[str]) -> None:
        delay = LIST_RETRY_S[0]
        while missing:
            await asyncio.sleep(delay)
            missing = await self.list_upstreams(missing)
            delay = min(LIST_RETRY_S[1], delay * 2)

    @contextlib.asynccontextmanager
    async def running(self, *, host: str = "127.0.0.1") -> AsyncIterator[str]:
        """Serve Streamable HTTP on a free port for the duration; yields the /mcp URL."""
        async with running_server(self.server, host=host) as url:
            yield url

    # --- serving ----------------------------------------------------------------------

    def _serve(self, tool: UpstreamTool) -> None:
        async def host_call(arguments: dict[str, Any], ctx: TaskContext) -> dict[str, Any]:
            return await self._host_call(tool, arguments, ctx)

        definition = tool.definition()
        spec = _ServedTool(
            name=tool.exposed,
            description=str(definition.get("description", "")),
            function=host_call,
            task_support="optional",
            poll_interval_ms=1_000,
            ttl_ms=24 * 3600 * 1000,
            # A host task re-run after a restart resolves to the same call node: the
            # upstream never runs twice, so the server may re-run the body.
            idempotent=True,
            input_schema=dict(definition["inputSchema"]),
            output_schema=None,
            arguments_model=_NoArguments,
            context_parameter="ctx",
            served=definition,
        )
        self.server.registry.add(spec)
        self.tools[tool.exposed] = tool

    def _register_gateway_tools(self) -> None:
        window = self.options.early_return_s

        async def longcall_status(ctx: TaskContext, handle: str, wait_s: float = 0) -> Any:
            """Where a long call stands, waiting up to wait_s seconds for it to finish
            (the result itself once it has). Use the handle a call returned."""
            return await self._status(ctx, handle, wait_s)

        async def longcall_result(ctx: TaskContext, handle: str, page: int = 1) -> Any:
            """Page `page` (from 1) of a finished call's result."""
            return await self._result(ctx, handle, page)

        async def longcall_cancel(ctx: TaskContext, handle: str) -> Any:
            """Ask the upstream to cancel a long call; says whether it confirmed."""
            return await self._cancel(ctx, handle)

        async def longcall_answer(ctx: TaskContext, handle: str, answers: dict[str, Any]) -> Any:
            """Answer the question a long call waits on: answers maps the form's fields to
            values (or, for several questions, each question's key to its fields)."""
            return await self._answer(ctx, handle, answers)

        for function in (longcall_status, longcall_result, longcall_cancel, longcall_answer):
            doc = (function.__doc__ or "").replace("\n           ", "")
            if function is longcall_status:
                doc += f" wait_s is at most {window:g}."
            spec = build_tool_spec(
                function,
                name=function.__name__,
                description=" ".join(doc.split()),
                task="forbidden",
                poll_interval_ms=1_000,
                ttl_ms=None,
                idempotent=function is not longcall_answer,
                output_schema=None,
            )
            self.server.registry.add(spec)

    # --- one host call ----------------------------------------------------------------

    async def _host_call(
        self, tool: UpstreamTool, arguments: dict[str, Any], ctx: TaskContext
    ) -> dict[str, Any]:
        started = self._clock()
        principal = ctx.principal.subject
        call = HostCall(principal=principal, tool=tool.exposed, arguments_digest=_digest(arguments))
        resolved = await self._start(tool, call, arguments)
        self._remember(principal, resolved.handle, tool.exposed)
        listeners = self._listeners.setdefault(resolved.node, set())
        listeners.add(ctx)
        try:
            if ctx.task_id is None:
                return await self._early(resolved, started)
            return await self._as_task(resolved, ctx)
        finally:
            listeners.discard(ctx)
            if not listeners:
                self._listeners.pop(resolved.node, None)

    async def _start(self, tool: UpstreamTool, call: HostCall, arguments: dict[str, Any]) -> Start:
        """The call node of this host call, attached to or started (never twice)."""
        lock = self._locks.setdefault(call, asyncio.Lock())
        try:
            async with lock:
                return await self._start_locked(tool, call, arguments)
        finally:
            # Once the node exists, a later same call resolves to it without the lock.
            if not lock.locked() and self._locks.get(call) is lock:
                del self._locks[call]

    async def _start_locked(
        self, tool: UpstreamTool, call: HostCall, arguments: dict[str, Any]
    ) -> Start:
        for _attempt in range(3):
            resolved = await self.client.executor.on_ledger_thread(self._resolve, call)
            if resolved.existing is not None:
                if resolved.attaches_to_open:
                    self.metrics.retries_attached.inc()
                await self.client.wait(resolved.node, timeout_s=0)
                return resolved
            try:
                await self.client.call(
                    tool.server,
                    tool.name,
                    arguments,
                    node=resolved.node,
                    wait=False,
                    timeout_s=0,
                )
            except DuplicateCallNode:
                continue  # another gateway process started it first: attach to it
            except LongcallError as exc:
                raise ToolError(
                    f"The call could not be started at {tool.server}: {exc}. Nothing"
                    " ran; you may call again."
                ) from exc
            return resolved
        raise ToolError("The call could not be started: it was raced three times; call again.")

    def _resolve(self, call: HostCall) -> Start:
        """On the ledger thread: the node a host call names under the repeat rule."""
        try:
            return resolve_call(self.client.ledger, call, now=self._clock(), options=self.options)
        except ValueError as exc:
            raise ToolError(f"This call cannot be made again through the gateway: {exc}.") from exc

    async def _early(self, resolved: Start, started: float) -> dict[str, Any]:
        """A task-unaware host: the real result within the window, else the handle."""
        remaining = early_wait_s(self.options, started=started, now=self._clock())
        result = await self.client.wait(resolved.node, timeout_s=remaining)
        if answer_for(result.record) is Answer.OUTCOME:
            reply = await self._deliver(resolved.handle, result, page=1)
            if resolved.repeats_ended:
                reply["content"] = [*reply.get("content", []), _again_note(resolved, self)]
            return reply
        self.metrics.early_returns.inc()
        return self._status_of(resolved.handle, result)

    async def _as_task(self, resolved: Start, ctx: TaskContext) -> dict[str, Any]:
        """A task-aware host: its task is this call; input is passed through."""
        try:
            while True:
                result = await self.client.wait(resolved.node)
                if result.input is not None and not result.record.is_terminal:
                    requests = await self.client.executor.on_ledger_thread(
                        self._requests_of, resolved.node, result
                    )
                    answers = await ctx.request_inputs(requests)
                    await self.client.answer(resolved.node, answers)
                    continue
                if result.record.is_terminal:
                    return outcome_reply(
                        resolved.handle, result, page=1, page_chars=self.options.page_chars
                    )
                reply = self._status_of(resolved.handle, result)
                reply["isError"] = True  # an operator must settle it: the task cannot
                return reply
        except asyncio.CancelledError:
            if ctx.task_id is not None and await self._task_cancelled(ctx.task_id):
                # The host cancelled its task: ask the upstream too (a request; the
                # upstream's terminal confirms it and the ledger keeps it).
                with contextlib.suppress(Exception):
                    await asyncio.shield(self.client.cancel(resolved.node))
            raise

    async def _task_cancelled(self, task_id: str) -> bool:
        record = await self.server.store.get(task_id)
        return record is not None and record.status is TaskStatus.CANCELLED

    def _requests_of(self, node: str, result: CallResult) -> dict[str, dict[str, Any]]:
        """The upstream's input requests as it sent them (stored with the round)."""
        assert result.input is not None
        requests: dict[str, dict[str, Any]] = {}
        for question in result.input.questions:
            raw = self.client.ledger.blob(node, REQUEST_BLOB_PREFIX + question.key)
            if raw is not None:
                requests[question.key] = json.loads(raw)
            else:
                params = {"message": question.message or "", "requestedSchema": question.schema}
                requests[question.key] = {"method": question.method, "params": params}
        return requests

    # --- the gateway tools ------------------------------------------------------------

    async def _status(self, ctx: TaskContext, handle: str, wait_s: float) -> dict[str, Any]:
        canonical, node = await self._owned(ctx, handle)
        result = await self.client.wait(node, timeout_s=status_wait_s(self.options, wait_s))
        if answer_for(result.record) is Answer.OUTCOME:
            return await self._deliver(canonical, result, page=1)
        return self._status_of(canonical, result)

    async def _result(self, ctx: TaskContext, handle: str, page: int) -> dict[str, Any]:
        canonical, node = await self._owned(ctx, handle)
        result = await self.client.wait(node, timeout_s=0)
        if not result.record.is_terminal:
            return self._status_of(canonical, result)
        if result.outcome not in (CallOutcome.PROTOCOL_ERROR, CallOutcome.CANCELLED):
            pages = page_count(result_body(result), self.options.page_chars)
            if not 1 <= page <= pages:
                raise ToolError(f"Page {page} does not exist: the result has {pages} page(s).")
        return await self._deliver(canonical, result, page=page)

    async def _cancel(self, ctx: TaskContext, handle: str) -> dict[str, Any]:
        canonical, node = await self._owned(ctx, handle)
        outcome = await self.client.cancel(node)
        wait = min(CANCEL_CONFIRM_S, self.options.early_return_s)
        result = await self.client.wait(node, timeout_s=wait)
        return cancel_reply(canonical, outcome, result)

    async def _answer(
        self, ctx: TaskContext, handle: str, answers: dict[str, Any]
    ) -> dict[str, Any]:
        canonical, node = await self._owned(ctx, handle)
        current = await self.client.wait(node, timeout_s=0)
        if current.input is None:
            raise ToolError(
                f"{canonical} waits for no answer (it is {state_word(current)}); call"
                f" {STATUS_TOOL} to see where it stands."
            )
        keys = current.input.keys
        if set(answers) <= set(keys) and all(isinstance(v, dict) for v in answers.values()):
            by_key = {key: _whole_answer(value) for key, value in answers.items()}
        elif len(keys) == 1:
            by_key = {keys[0]: _whole_answer(answers)}
        else:
            raise ToolError(f"Give answers by question key: {', '.join(keys)}.")
        try:
            await self.client.answer(node, by_key)
        except (InvalidAnswer, NotWaitingForInput) as exc:
            raise ToolError(f"The answer was not accepted: {exc}. Nothing was sent.") from exc
        result = await self.client.wait(node, timeout_s=self.options.early_return_s)
        if result.record.is_terminal:
            return await self._deliver(canonical, result, page=1)
        return self._status_of(canonical, result)

    # --- handles ----------------------------------------------------------------------

    async def _owned(self, ctx: TaskContext, handle: Any) -> tuple[str, str]:
        """(canonical handle, call node) of a handle this principal was given; anything
        else is refused with the principal's recent handles as the way back."""
        principal = ctx.principal.subject
        try:
            canonical, node = await self.client.executor.on_ledger_thread(
                owned_node, self.client.ledger, principal, handle
            )
        except HandleRefused as exc:
            await self._refuse(principal, str(exc))
        if node is None:
            await self._refuse(principal, f"No call has the handle {canonical}")
        return canonical, node

    async def _refuse(self, principal: str, reason: str) -> NoReturn:
        self.metrics.handles_refused.inc()
        if principal == ANONYMOUS.subject:
            # Everyone without a token over HTTP is this one principal: listing its
            # handles would show one caller's calls to another (stdio has its own).
            raise ToolError(refused_text(reason, None))
        recent = await self._recent_handles(principal)
        raise ToolError(refused_text(reason, recent))

    def _remember(self, principal: str, handle: str, tool: str) -> None:
        recent = self._recent.setdefault(
            principal, collections.deque(maxlen=self.options.recent_handles)
        )
        if (handle, tool) in recent:
            recent.remove((handle, tool))
        recent.appendleft((handle, tool))

    async def _recent_handles(self, principal: str) -> list[tuple[str, str]]:
        """This principal's recent handles: remembered here, else (after a restart) the
        open calls the ledger holds for it."""
        recent = list(self._recent.get(principal, ()))
        if recent:
            return recent

        def from_ledger() -> list[tuple[str, str]]:
            # Bounded: this principal's open gateway nodes, the newest few, on the
            # driver's ledger thread (a whole-ledger scan would hold up every call).
            records = self.client.ledger.recent_open_by_prefix(
                node_prefix(principal), limit=self.options.recent_handles
            )
            found: list[tuple[str, str]] = []
            for record in records:
                handle = handle_of_node(record.call_node_id)
                if handle is not None and owned_by(record.call_node_id, principal):
                    found.append((handle, record.tool_name))
            return found

        return await self.client.executor.on_ledger_thread(from_ledger)

    # --- results ----------------------------------------------------------------------

    async def _deliver(self, handle: str, result: CallResult, *, page: int) -> dict[str, Any]:
        """The outcome for the host, noted as delivered (the repeat rule reads it)."""
        self._fractions.pop(result.call_node_id, None)
        reply = outcome_reply(handle, result, page=page, page_chars=self.options.page_chars)
        await self.client.executor.on_ledger_thread(self._mark_delivered, result.call_node_id)
        return reply

    def _mark_delivered(self, node: str) -> None:
        """Before the outcome is sent: the first delivery, and this grace period's."""
        mark_delivered(self.client.ledger, node, now=self._clock(), options=self.options)

    def _status_of(self, handle: str, result: CallResult) -> dict[str, Any]:
        record = result.record
        return status_reply(
            handle,
            result,
            elapsed_s=max(0.0, self._clock() - record.created_at),
            fraction=self._fractions.get(record.call_node_id),
            wait_s=self.options.early_return_s,
        )

    # --- progress and metrics ---------------------------------------------------------

    async def _progress(self, progress: Progress) -> None:
        """Upstream progress, forwarded to every host waiting on the call."""
        node = progress.call_node_id
        if progress.fraction is not None:
            self._fractions[node] = progress.fraction
        for ctx in list(self._listeners.get(node, ())):
            fraction = progress.fraction
            with contextlib.suppress(Exception):  # a host that left takes no progress
                await ctx.report_progress(
                    round((fraction or 0.0) * 100, 2),
                    100.0 if fraction is not None else None,
                    progress.message,
                )

    def _open_handles(self) -> int:
        executor = self.client._executor
        if executor is None:
            return 0
        return sum(
            1
            for record in executor.held_records()
            if handle_of_node(record.call_node_id) is not None and not record.is_terminal
        )


def _again_note(resolved: Start, gateway: Gateway) -> dict[str, Any]:
    """Said when a same call got the outcome of the one before it (it did not run again)."""
    assert resolved.existing is not None  # repeats_ended
    ago = max(0, int(gateway._clock() - resolved.existing.updated_at))
    grace = int(gateway.options.repeat_grace_s)
    text = (
        f"Note: this is the outcome of the same call that ended {ago} s ago (handle"
        f" {resolved.handle}); the tool did not run again. The same call made more than"
        f" {grace} s after an outcome runs the tool anew."
    )
    return {"type": "text", "text": text}


def _digest(arguments: Mapping[str, Any]) -> str:
    return digest_json(dict(arguments))


def _whole_answer(value: Mapping[str, Any]) -> dict[str, Any]:
    """An answer as the upstream takes it: ``{action, content}``; bare fields accept."""
    if "action" in value and set(value) <= {"action", "content"}:
        return dict(value)
    return {"action": "accept", "content": dict(value)}


__all__ = ["ANSWER_TOOL", "CANCEL_TOOL", "RESULT_TOOL", "STATUS_TOOL", "Gateway", "GatewayOptions"]
