"""The task manager: creates tasks durably, runs tool functions, cancels, takes input (S2-S6).

Owns: the life of a task between the wire and the store — id generation (S5), the
durable create before the id is returned (S2), the execution of the tool body and its
terminal compare-and-set (S4), cancel, input requests and answers (S6), restart
recovery, and the in-process change hub that push notifications listen to (S7).
Must not: render wire shapes or read HTTP; the protocol modules do that.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import secrets
from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import dataclass
from typing import Any

from longcall.server.errors import (
    INTERNAL_ERROR,
    InvalidParams,
    JsonRpcError,
    SubmissionKeyConflict,
    TaskNotFound,
    ToolError,
    ToolProtocolError,
)
from longcall.server.model import (
    ACTIVE_STATUSES,
    InputRequest,
    NewTask,
    Principal,
    ProtocolVersion,
    TaskRecord,
    TaskStatus,
)
from longcall.server.options import ServerOptions
from longcall.server.store import TaskStore
from longcall.server.tools import (
    ToolRegistry,
    ToolSpec,
    arguments_digest,
    call_tool_result,
    json_size,
    tool_error_result,
)

logger = logging.getLogger(__name__)

Clock = Callable[[], float]

TASK_ID_BYTES = 24
"""192 random bits from ``secrets``: unguessable task ids (S5 asks for at least 128)."""

RESTART_ERROR_MESSAGE = (
    "The server restarted while this task was running; the tool is not declared idempotent,"
    " so it was not re-run. Its effects, if any, are unknown."
)


def new_task_id() -> str:
    """A fresh unguessable, header-safe task id (S5)."""
    return secrets.token_urlsafe(TASK_ID_BYTES)


@dataclass(frozen=True, slots=True, kw_only=True)
class Progress:
    """The latest progress a running task reported (pushed as 2025-11-25 notifications/progress)."""

    progress: float
    total: float | None
    message: str | None


@dataclass(frozen=True, slots=True, kw_only=True)
class TaskChange:
    """One change of one task, as push streams receive it."""

    task_id: str
    progress: Progress | None = None


class ChangeHub:
    """In-process fan-out of "task X changed" (S7 push; waits of blocking calls)."""

    def __init__(self) -> None:
        self._events: dict[str, asyncio.Event] = {}
        self._listeners: set[asyncio.Queue[TaskChange]] = set()

    def event(self, task_id: str) -> asyncio.Event:
        """An event set at the next change of the task; take it *before* reading the store."""
        event = self._events.get(task_id)
        if event is None:
            event = self._events[task_id] = asyncio.Event()
        return event

    def publish(self, task_id: str, progress: Progress | None = None) -> None:
        """Wake everyone waiting on the task and every listener (with the progress, if any)."""
        event = self._events.pop(task_id, None)
        if event is not None:
            event.set()
        change = TaskChange(task_id=task_id, progress=progress)
        for queue in self._listeners:
            queue.put_nowait(change)

    @contextlib.contextmanager
    def listen(self) -> Any:
        """A queue receiving every task change while the context is open."""
        queue: asyncio.Queue[TaskChange] = asyncio.Queue()
        self._listeners.add(queue)
        try:
            yield queue
        finally:
            self._listeners.discard(queue)


@dataclass(frozen=True, slots=True, kw_only=True)
class CreateOutcome:
    """A task returned by ``tools/call``: the record and whether this call created it."""

    record: TaskRecord
    created: bool


class _SyncContext:
    """The context of a call answered synchronously: no task, so no input (S6 needs a task)."""

    def __init__(self, principal: Principal) -> None:
        self._principal = principal

    @property
    def task_id(self) -> str | None:
        return None

    @property
    def principal(self) -> Principal:
        return self._principal

    async def report_progress(
        self, progress: float, total: float | None = None, message: str | None = None
    ) -> None:
        return None

    async def elicit(self, message: str, requested_schema: dict[str, Any]) -> dict[str, Any]:
        raise ToolError("this tool asks for input, which needs a task; call it as a task")


class _RunningTaskContext:
    """The context of a tool running as a task (one execution epoch)."""

    def __init__(self, manager: TaskManager, record: TaskRecord, principal: Principal) -> None:
        self._manager = manager
        self._task_id = record.task_id
        self._epoch = record.execution_epoch
        self._principal = principal
        self._next_input_sequence = 1
        self._client_can_elicit = record.client_can_elicit

    @property
    def task_id(self) -> str | None:
        return self._task_id

    @property
    def principal(self) -> Principal:
        return self._principal

    async def report_progress(
        self, progress: float, total: float | None = None, message: str | None = None
    ) -> None:
        text = message
        if text is None:
            text = f"{progress:g}/{total:g}" if total is not None else f"{progress:g}"
        note = Progress(progress=progress, total=total, message=message)
        await self._manager.set_status_message(
            self._task_id, text, epoch=self._epoch, progress=note
        )

    async def elicit(self, message: str, requested_schema: dict[str, Any]) -> dict[str, Any]:
        if not self._client_can_elicit:
            # SEP-2663 / MRTR: never issue an input request the client did not declare (S6).
            raise ToolError(
                "this tool needs input, but the client that created the task did not declare"
                " the elicitation capability"
            )
        sequence = self._next_input_sequence
        self._next_input_sequence += 1
        params = {"mode": "form", "message": message, "requestedSchema": requested_schema}
        return await self._manager.wait_for_input(
            self._task_id, epoch=self._epoch, sequence=sequence, params=params
        )


class TaskManager:
    """Creates, runs, cancels and answers tasks over one durable store."""

    def __init__(
        self,
        *,
        store: TaskStore,
        registry: ToolRegistry,
        clock: Clock,
        options: ServerOptions | None = None,
    ) -> None:
        self.store = store
        self.registry = registry
        self.clock = clock
        self.options = options or ServerOptions()
        self.hub = ChangeHub()
        self._running: dict[str, asyncio.Task[None]] = {}

    # ---- lifecycle -------------------------------------------------------------------------

    async def start(self) -> None:
        """Purge long-expired rows, then recover tasks a previous process left active (S2)."""
        await self.store.purge(self.clock())
        for record in await self.store.active_tasks():
            await self._recover(record)

    async def stop(self) -> None:
        """Stop running executions without touching their rows (the next start recovers them)."""
        running = list(self._running.values())
        for task in running:
            task.cancel()
        for task in running:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        self._running.clear()

    async def _recover(self, record: TaskRecord) -> None:
        now = self.clock()
        spec = self.registry.get(record.tool_name)
        if record.is_expired(now):
            await self._fail(record, "The task's ttl elapsed while the server was down.", now)
        elif spec is None:
            await self._fail(record, f"The tool {record.tool_name!r} is no longer served.", now)
        elif not spec.idempotent:
            await self._fail(record, RESTART_ERROR_MESSAGE, now)
        else:
            rerun = await self.store.begin_execution(record.task_id, now=now)
            if rerun is None:
                return
            if rerun.status is TaskStatus.INPUT_REQUIRED and not await self._outstanding(rerun):
                # A crash between storing the last answer and resuming: resume now (S6).
                await self.store.transition(
                    rerun.task_id,
                    allowed_from={TaskStatus.INPUT_REQUIRED},
                    to=TaskStatus.WORKING,
                    now=now,
                    reason="input answered before restart",
                )
            logger.info("re-running idempotent task %s after restart", record.task_id)
            self._spawn(rerun, spec)

    async def _fail(self, record: TaskRecord, message: str, now: float) -> None:
        error = {"code": -32603, "message": message}
        await self.store.transition(
            record.task_id,
            allowed_from=ACTIVE_STATUSES,
            to=TaskStatus.FAILED,
            now=now,
            reason="server restart",
            status_message=message,
            error=error,
        )
        self.hub.publish(record.task_id)

    # ---- creation and execution --------------------------------------------------------------

    async def create(
        self,
        *,
        principal: Principal,
        spec: ToolSpec,
        arguments: dict[str, Any],
        protocol: ProtocolVersion,
        submission_key: str | None,
        ttl_ms: int | None,
        client_can_elicit: bool = True,
    ) -> CreateOutcome:
        """Create the task durably (S2) or return the one of the same submission key (S3)."""
        self.check_arguments(spec, arguments)
        new = NewTask(
            task_id=new_task_id(),
            principal=principal.subject,
            tool_name=spec.name,
            arguments=arguments,
            arguments_digest=arguments_digest(arguments),
            protocol=protocol,
            submission_key=submission_key,
            created_at=self.clock(),
            ttl_ms=ttl_ms,
            poll_interval_ms=spec.poll_interval_ms,
            status_message="The operation is now in progress.",
            client_can_elicit=client_can_elicit,
        )
        try:
            record, created = await self.store.create(new)
        except SubmissionKeyConflict as exc:
            raise InvalidParams(str(exc), {"submissionKey": submission_key}) from exc
        if record.protocol is not protocol:
            raise InvalidParams(
                f"submission key {submission_key!r} belongs to a task of protocol"
                f" {record.protocol.value}; it cannot be resumed at {protocol.value}"
            )
        if created:
            self._spawn(record, spec)
            self.hub.publish(record.task_id)
        return CreateOutcome(record=record, created=created)

    async def call_synchronously(
        self, *, principal: Principal, spec: ToolSpec, arguments: dict[str, Any]
    ) -> dict[str, Any]:
        """Run the tool inline and return its ``CallToolResult`` (or raise its JSON-RPC error)."""
        kwargs = self.check_arguments(spec, arguments)
        if spec.context_parameter is not None:
            kwargs[spec.context_parameter] = _SyncContext(principal)
        result, error = await self._run_tool(spec, kwargs, task_id=None)
        if error is not None:
            raise JsonRpcError(int(error["code"]), str(error["message"]), error.get("data"))
        assert result is not None
        return result

    def check_arguments(self, spec: ToolSpec, arguments: Any) -> dict[str, Any]:
        """Validated keyword arguments within the size cap, on every path that runs a tool."""
        limit = self.options.max_argument_bytes
        size = json_size(arguments)
        if size > limit:
            raise InvalidParams(
                f"the arguments are {size} bytes; the limit is {limit}",
                {"sizeBytes": size, "limitBytes": limit},
            )
        return spec.validate_arguments(arguments)

    async def _run_tool(
        self, spec: ToolSpec, kwargs: dict[str, Any], *, task_id: str | None
    ) -> tuple[dict[str, Any] | None, dict[str, Any] | None]:
        """(result, error) of one run of the tool body; nothing it raises escapes.

        A ``ToolError`` is the author's message to the caller (``isError``); a
        ``ToolProtocolError`` is a JSON-RPC error; any other exception is a bug whose text
        may hold secrets, so the caller sees only a reference and the log has the rest.
        A result over the size cap is not kept: the call fails saying so.
        """
        try:
            result = call_tool_result(await spec.function(**kwargs))
        except ToolError as exc:
            return tool_error_result(str(exc)), None
        except ToolProtocolError as exc:
            return None, exc.to_wire()
        except Exception:
            reference = secrets.token_hex(6)
            logger.exception("tool %s raised (task %s, ref %s)", spec.name, task_id, reference)
            message = f"The tool {spec.name!r} failed with an internal error (ref {reference})."
            return tool_error_result(message), None
        size = json_size(result)
        if size > self.options.max_result_bytes:
            message = (
                f"The result of {spec.name!r} is {size} bytes; the server keeps at most"
                f" {self.options.max_result_bytes}."
            )
            limits = {"sizeBytes": size, "limitBytes": self.options.max_result_bytes}
            return None, {"code": INTERNAL_ERROR, "message": message, "data": limits}
        return result, None

    def _spawn(self, record: TaskRecord, spec: ToolSpec) -> None:
        task = asyncio.get_running_loop().create_task(
            self._execute(record, spec), name=f"longcall-task-{record.task_id}"
        )
        self._running[record.task_id] = task
        task.add_done_callback(lambda _: self._forget(record.task_id, task))

    def _forget(self, task_id: str, task: asyncio.Task[None]) -> None:
        if self._running.get(task_id) is task:
            del self._running[task_id]

    async def _execute(self, record: TaskRecord, spec: ToolSpec) -> None:
        kwargs = spec.validate_arguments(record.arguments)
        if spec.context_parameter is not None:
            principal = Principal(subject=record.principal)
            kwargs[spec.context_parameter] = _RunningTaskContext(self, record, principal)
        result, error = await self._run_tool(spec, kwargs, task_id=record.task_id)
        await self._finish(record, result=result, error=error)

    async def _finish(
        self, record: TaskRecord, *, result: dict[str, Any] | None, error: dict[str, Any] | None
    ) -> None:
        # 2026-07-28: a tool error is `completed` + isError; 2025-11-25: it is `failed` (§4).
        is_tool_error = result is not None and bool(result.get("isError"))
        failed = error is not None or (is_tool_error and record.protocol is ProtocolVersion.LEGACY)
        message = None
        if error is not None:
            message = str(error.get("message"))
        elif is_tool_error and result is not None:
            message = _first_text(result)
        finished = await self.store.transition(
            record.task_id,
            allowed_from=ACTIVE_STATUSES,
            to=TaskStatus.FAILED if failed else TaskStatus.COMPLETED,
            now=self.clock(),
            reason="tool returned" if error is None else "tool raised a protocol error",
            status_message=message or ("The operation completed." if not failed else None),
            result=result,
            error=error,
            epoch=record.execution_epoch,
        )
        if finished is None:
            # S4: the terminal CAS lost (cancelled first, or a newer epoch);
            # the loser changes nothing.
            logger.info("completion of task %s lost to an earlier terminal", record.task_id)
        self.hub.publish(record.task_id)

    async def set_status_message(
        self, task_id: str, message: str, *, epoch: int, progress: Progress | None = None
    ) -> None:
        """Record a progress message of an active task (real ``lastUpdatedAt``)."""
        if await self.store.set_status_message(task_id, message, now=self.clock(), epoch=epoch):
            self.hub.publish(task_id, progress)

    # ---- reads -------------------------------------------------------------------------------

    async def visible(
        self, principal: Principal, task_id: Any, protocol: ProtocolVersion
    ) -> TaskRecord:
        """The task if this principal may see it; otherwise exactly "not found" (S5)."""
        if not isinstance(task_id, str) or not task_id:
            raise InvalidParams("params.taskId must be a non-empty string")
        record = await self.store.get(task_id)
        if (
            record is None
            or record.principal != principal.subject
            or record.protocol is not protocol
            or record.is_expired(self.clock())
        ):
            raise TaskNotFound(task_id)
        return record

    async def outstanding_inputs(self, task_id: str) -> list[InputRequest]:
        """The unanswered input requests of a task, in issue order."""
        return [req for req in await self.store.input_requests(task_id) if not req.is_answered]

    async def _outstanding(self, record: TaskRecord) -> list[InputRequest]:
        return await self.outstanding_inputs(record.task_id)

    async def lookup_submission(self, principal: Principal, key: str) -> tuple[str, bool] | None:
        """(task id, expired) of the caller's task created under ``key``, if any (S3)."""
        task_id = await self.store.lookup_submission(principal.subject, key)
        if task_id is None:
            return None
        record = await self.store.get(task_id)
        expired = record is None or record.is_expired(self.clock())
        return task_id, expired

    # ---- cancel --------------------------------------------------------------------------------

    async def cancel(self, record: TaskRecord) -> TaskRecord | None:
        """CAS to ``cancelled`` before anyone is told (S4); ``None`` if already terminal."""
        cancelled = await self.store.transition(
            record.task_id,
            allowed_from=ACTIVE_STATUSES,
            to=TaskStatus.CANCELLED,
            now=self.clock(),
            reason="cancel requested",
            status_message="The task was cancelled by request.",
        )
        if cancelled is not None:
            running = self._running.get(record.task_id)
            if running is not None:
                running.cancel()
            self.hub.publish(record.task_id)
        return cancelled

    # ---- input -----------------------------------------------------------------------------

    async def wait_for_input(
        self, task_id: str, *, epoch: int, sequence: int, params: dict[str, Any]
    ) -> dict[str, Any]:
        """Issue (or find, after a re-run) input request ``sequence``; wait for its answer (S6)."""
        key = f"{sequence}.{secrets.token_hex(8)}"
        while True:
            changed = self.hub.event(task_id)
            request = await self.store.open_input_request(
                task_id,
                sequence=sequence,
                key=key,
                method="elicitation/create",
                params=params,
                now=self.clock(),
            )
            if request.response is not None:
                return request.response
            parked = await self.store.transition(
                task_id,
                allowed_from={TaskStatus.WORKING},
                to=TaskStatus.INPUT_REQUIRED,
                now=self.clock(),
                reason=f"input requested ({request.key})",
                status_message="Waiting for input.",
                epoch=epoch,
            )
            if parked is not None:
                self.hub.publish(task_id)
                changed = self.hub.event(task_id)
            await changed.wait()

    async def answer(
        self, record: TaskRecord, responses: Mapping[str, Mapping[str, Any]]
    ) -> list[str]:
        """Store answers to outstanding keys (unknown/answered keys are ignored, S6)."""
        if record.status.is_terminal:
            return []
        answered = await self.store.answer_inputs(record.task_id, responses, now=self.clock())
        if answered and not await self.outstanding_inputs(record.task_id):
            await self.store.transition(
                record.task_id,
                allowed_from={TaskStatus.INPUT_REQUIRED},
                to=TaskStatus.WORKING,
                now=self.clock(),
                reason="input answered",
                status_message="Input received; working.",
            )
        if answered:
            self.hub.publish(record.task_id)
        return answered

    async def wait_terminal(
        self, principal: Principal, task_id: str, protocol: ProtocolVersion
    ) -> TaskRecord:
        """Block until the task is terminal (2025-11-25 ``tasks/result``)."""
        while True:
            changed = self.hub.event(task_id)
            record = await self.visible(principal, task_id, protocol)
            if record.status.is_terminal:
                return record
            await changed.wait()

    @contextlib.asynccontextmanager
    async def watching(self) -> AsyncIterator[asyncio.Queue[TaskChange]]:
        """Listen to every task change while the context is open (S7 push streams)."""
        with self.hub.listen() as queue:
            yield queue


def _first_text(result: Mapping[str, Any]) -> str | None:
    for block in result.get("content") or []:
        if isinstance(block, dict) and block.get("type") == "text":
            return str(block.get("text"))
    return None
