"""The task manager: creates tasks durably, runs tool functions, cancels, takes input (S2-S6, D1).

Owns: the life of a task between the wire and the store — id generation (S5), the
durable create before the id is returned (S2), the execution of the tool body and its
terminal compare-and-set (S4), cancel, input requests and answers (S6), the leases that
bind each running task to this process and the takeover of tasks whose owner stopped
(D1), and the in-process change hub that waits and push streams listen to (S7).
Must not: render wire shapes or read HTTP; the protocol modules do that.

A store failure never kills a task silently (the class of bug where a locked store
ended a task ``completed`` with ``isError: "database is locked"``, or left it
``working`` forever): progress messages are best effort, input waits and the terminal
write are retried with backoff until they land or the run is fenced off, and a task
this process can no longer finish keeps its lease only while the process lives —
after that another process (or the next start) takes it over.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import logging
import os
import secrets
import socket
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from longcall.server.errors import (
    INTERNAL_ERROR,
    InvalidParams,
    JsonRpcError,
    QuotaExceeded,
    StoreUnavailable,
    SubmissionKeyConflict,
    TaskNotFound,
    ToolError,
    ToolProtocolError,
    TooManyOpenTasks,
)
from longcall.server.front import REASON_TOO_MANY_OPEN_TASKS
from longcall.server.inputs import (
    InputNeeded,
    check_request,
    elicitation,
    missing_capability,
    undeclared,
)
from longcall.server.metrics import ServerMetrics
from longcall.server.model import (
    InputRequest,
    NewTask,
    Principal,
    ProtocolVersion,
    TaskRecord,
    TaskStatus,
)
from longcall.server.options import ServerOptions
from longcall.server.states import Cause
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
T = TypeVar("T")

TASK_ID_BYTES = 24
"""192 random bits from ``secrets``: unguessable task ids (S5 asks for at least 128)."""
RETRY_DELAY_S_MIN = 0.05
RETRY_DELAY_S_MAX = 2.0
LISTENER_BACKLOG_MAX = 1_024
"""Changes one push stream may have pending; past it the oldest are dropped (polling is truth)."""

INPUT_RECEIVED = "Input received; working."
"""The status message of a task its answers set going again."""
OWNER_LOST_MESSAGE = (
    "The server process running this task stopped; the tool is not declared idempotent,"
    " so it was not re-run. Its effects, if any, are unknown."
)


def new_task_id() -> str:
    """A fresh unguessable, header-safe task id (S5)."""
    return secrets.token_urlsafe(TASK_ID_BYTES)


def new_owner_id() -> str:
    """This process's lease-holder name: host, pid and a random part (never reused)."""
    return f"{socket.gethostname()}/{os.getpid()}/{secrets.token_hex(4)}"


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


class Listener:
    """A push stream's pending changes: one principal's tasks only, coalesced, bounded (S7)."""

    def __init__(self, principal: str | None) -> None:
        self.principal = principal
        self._pending: dict[str, Progress | None] = {}
        self._ready = asyncio.Event()

    def offer(self, change: TaskChange) -> None:
        if change.task_id not in self._pending and len(self._pending) >= LISTENER_BACKLOG_MAX:
            self._pending.pop(next(iter(self._pending)))
        self._pending[change.task_id] = change.progress or self._pending.get(change.task_id)
        self._ready.set()

    def put_nowait(self, change: TaskChange) -> None:
        """Queue a change by hand (a stream's initial snapshot)."""
        self.offer(change)

    async def get(self) -> TaskChange:
        """The oldest pending change (waits for one)."""
        while not self._pending:
            self._ready.clear()
            await self._ready.wait()
        task_id = next(iter(self._pending))
        return TaskChange(task_id=task_id, progress=self._pending.pop(task_id))


class ChangeHub:
    """In-process fan-out of "task X changed" (S7 push; waits of blocking calls).

    Nothing here outlives its waiter: a wait registers an event for one task and removes
    it when it ends (found or not), and a listener is dropped when its stream closes.
    """

    def __init__(self) -> None:
        self._waiters: dict[str, set[asyncio.Event]] = {}
        self._listeners: set[Listener] = set()

    @contextlib.contextmanager
    def watch(self, task_id: str) -> Iterator[asyncio.Event]:
        """An event set at the next change of the task; enter it *before* reading the store."""
        event = asyncio.Event()
        self._waiters.setdefault(task_id, set()).add(event)
        try:
            yield event
        finally:
            waiters = self._waiters.get(task_id)
            if waiters is not None:
                waiters.discard(event)
                if not waiters:
                    del self._waiters[task_id]

    def publish(
        self, task_id: str, principal: str | None = None, progress: Progress | None = None
    ) -> None:
        """Wake everyone waiting on the task and the listeners of its principal."""
        for event in self._waiters.get(task_id, ()):
            event.set()
        change = TaskChange(task_id=task_id, progress=progress)
        for listener in self._listeners:
            if listener.principal is None or principal is None or listener.principal == principal:
                listener.offer(change)

    @contextlib.contextmanager
    def listen(self, principal: str | None = None) -> Iterator[Listener]:
        """Changes of ``principal``'s tasks (all tasks: ``None``) while the context is open."""
        listener = Listener(principal)
        self._listeners.add(listener)
        try:
            yield listener
        finally:
            self._listeners.discard(listener)

    @property
    def size(self) -> int:
        """Registered waits and listeners (a leak shows here)."""
        return sum(len(events) for events in self._waiters.values()) + len(self._listeners)


@dataclass(frozen=True, slots=True, kw_only=True)
class CreateOutcome:
    """A task returned by ``tools/call``: the record and whether this call created it."""

    record: TaskRecord
    created: bool


class SyncContext:
    """The context of a call answered synchronously (no task).

    Input comes by SEP-2322 rounds when the client can take part in them (a 2026-07-28
    call): the answers gathered so far are here, a missing one ends the round.
    """

    def __init__(
        self,
        principal: Principal,
        *,
        answers: Mapping[str, dict[str, Any]] | None = None,
        capabilities: Mapping[str, Any] | None = None,
        rounds: int = 0,
        multi_round: bool = False,
    ) -> None:
        self._principal = principal
        self._answers = dict(answers or {})
        self._capabilities = capabilities
        self._rounds = rounds
        self._multi_round = multi_round
        self._next_input = 1
        self.progress_sink: Callable[[Progress], None] | None = None
        """Where progress goes while the call streams its answer (else it is dropped)."""

    @property
    def task_id(self) -> str | None:
        return None

    @property
    def principal(self) -> Principal:
        return self._principal

    @property
    def client_capabilities(self) -> Mapping[str, Any] | None:
        return self._capabilities

    @property
    def rounds(self) -> int:
        return self._rounds

    async def report_progress(
        self, progress: float, total: float | None = None, message: str | None = None
    ) -> None:
        if self.progress_sink is not None:
            self.progress_sink(Progress(progress=progress, total=total, message=message))

    async def request_inputs(
        self, requests: Mapping[str, Mapping[str, Any]]
    ) -> dict[str, dict[str, Any]]:
        for key, request in requests.items():
            check_request(key, request)
        if self._capabilities is not None and undeclared(requests, self._capabilities):
            raise missing_capability(requests, self._capabilities)
        missing = {key: request for key, request in requests.items() if key not in self._answers}
        if missing:
            if not self._multi_round:
                raise ToolError(
                    "this tool asks for input, which needs a task (or a 2026-07-28 client,"
                    " which can answer in rounds); call it as a task"
                )
            raise InputNeeded(missing)
        return {key: self._answers[key] for key in requests}

    async def elicit(
        self, message: str, requested_schema: dict[str, Any], *, key: str | None = None
    ) -> dict[str, Any]:
        if key is None:
            key = f"input-{self._next_input}"
            self._next_input += 1
        answers = await self.request_inputs({key: elicitation(message, requested_schema)})
        return answers[key]


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

    @property
    def client_capabilities(self) -> Mapping[str, Any] | None:
        return None

    @property
    def rounds(self) -> int:
        return 0

    async def report_progress(
        self, progress: float, total: float | None = None, message: str | None = None
    ) -> None:
        text = message
        if text is None:
            text = f"{progress:g}/{total:g}" if total is not None else f"{progress:g}"
        note = Progress(progress=progress, total=total, message=message)
        await self._manager.set_status_message(
            self._task_id, text, epoch=self._epoch, principal=self._principal.subject, progress=note
        )

    async def request_inputs(
        self, requests: Mapping[str, Mapping[str, Any]]
    ) -> dict[str, dict[str, Any]]:
        for key, request in requests.items():
            check_request(key, request)
        if not self._client_can_elicit:
            # SEP-2663 / MRTR: never issue an input request the client did not declare (S6).
            raise ToolError(
                "this tool needs input, but the client that created the task did not declare"
                " the elicitation capability"
            )
        numbered = []
        for key, request in requests.items():
            numbered.append((self._next_input_sequence, key, request))
            self._next_input_sequence += 1
        return await self._manager.wait_for_inputs(
            self._task_id, epoch=self._epoch, requests=numbered
        )

    async def elicit(
        self, message: str, requested_schema: dict[str, Any], *, key: str | None = None
    ) -> dict[str, Any]:
        name = key or "input"
        answers = await self.request_inputs({name: elicitation(message, requested_schema)})
        return answers[name]


class TaskManager:
    """Creates, runs, cancels and answers tasks over one durable store."""

    def __init__(
        self,
        *,
        store: TaskStore,
        registry: ToolRegistry,
        clock: Clock,
        options: ServerOptions | None = None,
        metrics: ServerMetrics | None = None,
    ) -> None:
        self.store = store
        self.registry = registry
        self.clock = clock
        self.options = options or ServerOptions()
        self.owner = new_owner_id()
        self.hub = ChangeHub()
        self._running: dict[str, asyncio.Task[None]] = {}
        self._awaiting_input: collections.Counter[str] = collections.Counter()
        """Tasks whose run here waits for input, with how many of its waits are parked (a
        tool may ask in several at once: two ``elicit`` under ``asyncio.gather``); the
        rest of ``_running`` are working."""
        self._keeper: asyncio.Task[None] | None = None
        self.handed_back: int | None = None
        """Open tasks whose leases the last :meth:`stop` handed back to the store (None:
        not stopped, or the store could not be reached): another process takes them over."""
        self.metrics = metrics or ServerMetrics(clock=clock)
        self.metrics.bind(self.open_tasks)

    def open_tasks(self) -> dict[TaskStatus, int]:
        """This process's open tasks by status: its runs, parked for input or working.

        In memory, so a scrape costs nothing; processes sharing a store each count their own.
        Called from the metrics thread: copying the dict of string keys and testing
        membership in the counter of parked waits (a dict) happen under the GIL without
        running Python code, so they see one state.
        """
        running = list(self._running)
        parked = sum(1 for task_id in running if task_id in self._awaiting_input)
        return {
            TaskStatus.WORKING: len(running) - parked,
            TaskStatus.INPUT_REQUIRED: parked,
        }

    async def transition(self, task_id: str, cause: Cause, **changes: Any) -> TaskRecord | None:
        """``store.transition`` (a compare-and-set) that counts the terminal statuses it stores."""
        changed = await self.store.transition(task_id, cause, **changes)
        if changed is not None and changed.status.is_terminal:
            self.metrics.observe_ended(changed)
        return changed

    # ---- lifecycle -------------------------------------------------------------------------

    async def start(self) -> None:
        """Take this process's proof of life, purge long-expired rows, take over tasks
        nobody holds or whose owner is proven dead, then keep leases (S2, D1)."""
        await self.store.hold_owner(self.owner)
        await self.store.purge(self.clock())
        await self._claim_expired()
        self._keeper = asyncio.get_running_loop().create_task(
            self._keep_leases(), name="longcall-lease-keeper"
        )

    async def stop(self) -> None:
        """Stop executions without touching their status, and hand their leases back."""
        if self._keeper is not None:
            self._keeper.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._keeper
            self._keeper = None
        running = list(self._running.values())
        for task in running:
            task.cancel()
        for task in running:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        self._running.clear()
        with contextlib.suppress(StoreUnavailable):
            self.handed_back = await self.store.release(self.owner)

    def lease_until(self) -> float:
        """When a lease taken or renewed now expires (server clock)."""
        return self.clock() + self.options.lease_s

    async def _keep_leases(self) -> None:
        """Renew this process's leases, stop runs it lost, take over expired ones (D1)."""
        interval = self.options.lease_s / 3
        while True:
            await asyncio.sleep(interval)
            try:
                # Only runs that existed before the renewal read the rows can be judged by
                # it: a task created meanwhile is ours but not in ``held`` yet.
                known = dict(self._running)
                held = await self.store.renew_leases(self.owner, until=self.lease_until())
                self._stop_lost_runs(known, held)
                await self._claim_expired()
            except StoreUnavailable as exc:
                logger.warning("could not renew task leases: %s", exc)
            except Exception:
                logger.exception("lease keeper failed; retrying")

    def _stop_lost_runs(
        self, known: Mapping[str, asyncio.Task[None]], held: Mapping[str, int]
    ) -> None:
        """A run whose task is no longer ours (cancelled, ended, claimed) stops here."""
        for task_id, task in known.items():
            if task_id not in held and self._running.get(task_id) is task:
                task.cancel()

    async def _claim_expired(self) -> None:
        while True:
            claimed = await self.store.claim_expired(
                self.owner, clock=self.clock, lease_s=self.options.lease_s
            )
            for record in claimed:
                await self._resume(record)
            if not claimed:
                return

    async def _resume(self, record: TaskRecord) -> None:
        """A claimed task (its owner stopped): re-run it, or end it saying why (D1)."""
        spec = self.registry.get(record.tool_name)
        epoch = record.execution_epoch
        if record.is_expired(self.clock()):
            self.metrics.observe_takeover("ttl_elapsed")
            await self._end(
                record,
                Cause.NOT_RESUMABLE,
                "The task's ttl elapsed while no server process was running it.",
                epoch,
            )
        elif spec is None:
            self.metrics.observe_takeover("tool_gone")
            await self._end(
                record,
                Cause.NOT_RESUMABLE,
                f"The tool {record.tool_name!r} is no longer served.",
                epoch,
            )
        elif not spec.idempotent:
            self.metrics.observe_takeover("owner_lost")
            await self._end(record, Cause.OWNER_LOST, OWNER_LOST_MESSAGE, epoch)
        else:
            if record.status is TaskStatus.INPUT_REQUIRED and not await self._outstanding(record):
                # Stopped between storing the last answer and resuming: resume now (S6).
                await self.transition(
                    record.task_id, Cause.INPUT_ANSWERED, now=self.clock(), epoch=epoch
                )
            logger.info("re-running idempotent task %s (epoch %d)", record.task_id, epoch)
            self.metrics.observe_takeover("rerun")
            self._spawn(record, spec)

    async def _end(self, record: TaskRecord, cause: Cause, message: str, epoch: int) -> None:
        error = {"code": INTERNAL_ERROR, "message": message}
        await self.transition(
            record.task_id,
            cause,
            now=self.clock(),
            status_message=message,
            error=error,
            epoch=epoch,
        )
        self.hub.publish(record.task_id, record.principal)

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
        progress_token: str | int | None = None,
        answered: Sequence[tuple[str, Mapping[str, Any], Mapping[str, Any]]] = (),
        run_timeout_s: float | None = None,
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
            progress_token=progress_token,
            run_timeout_s=run_timeout_s,
        )
        try:
            record, created = await self.store.create(
                new,
                owner=self.owner,
                lease_until=self.lease_until(),
                max_open=self.options.max_open_tasks_per_principal,
                answered=answered,
            )
        except SubmissionKeyConflict as exc:
            raise InvalidParams(str(exc), {"submissionKey": submission_key}) from exc
        except QuotaExceeded as exc:
            self.metrics.observe_refused(REASON_TOO_MANY_OPEN_TASKS)
            raise TooManyOpenTasks(str(exc), self.options.max_open_tasks_per_principal) from exc
        if record.protocol is not protocol:
            raise InvalidParams(
                f"submission key {submission_key!r} belongs to a task of protocol"
                f" {record.protocol.value}; it cannot be resumed at {protocol.value}"
            )
        if created:
            self.metrics.observe_created(spec.name, protocol.value)
            self._spawn(record, spec)
            self.hub.publish(record.task_id, record.principal)
        return CreateOutcome(record=record, created=created)

    async def call_synchronously(
        self,
        *,
        principal: Principal,
        spec: ToolSpec,
        arguments: dict[str, Any],
        context: SyncContext | None = None,
    ) -> dict[str, Any]:
        """Run the tool inline and return its ``CallToolResult`` (or raise its JSON-RPC error;
        :class:`InputNeeded` ends a SEP-2322 round)."""
        kwargs = self.check_arguments(spec, arguments)
        if spec.context_parameter is not None:
            kwargs[spec.context_parameter] = context or SyncContext(principal)
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
        except JsonRpcError:
            raise  # the request's own error (a missing client capability), not the tool's
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
        task.add_done_callback(lambda done: self._forget(record.task_id, done))

    def _forget(self, task_id: str, task: asyncio.Task[None]) -> None:
        if self._running.get(task_id) is task:
            del self._running[task_id]
        if not task.cancelled() and task.exception() is not None:
            # Never "Task exception was never retrieved": the lease lapses and another
            # run (here or elsewhere) takes the task over.
            logger.error(
                "execution of task %s ended abnormally", task_id, exc_info=task.exception()
            )

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
        finished = await self.retrying(
            f"finish task {record.task_id}",
            lambda: self.transition(
                record.task_id,
                Cause.TOOL_FAILED if failed else Cause.TOOL_RETURNED,
                now=self.clock(),
                status_message=message or ("The operation completed." if not failed else None),
                result=result,
                error=error,
                epoch=record.execution_epoch,
            ),
        )
        if finished is None:
            # S4: the terminal CAS lost (cancelled first, or fenced off by a newer epoch);
            # the loser changes nothing.
            logger.info("completion of task %s lost to an earlier terminal", record.task_id)
            self.metrics.observe_completion_lost()
        self.hub.publish(record.task_id, record.principal)

    async def retrying(self, what: str, attempt: Callable[[], Awaitable[T]]) -> T:
        """``attempt()`` until the store takes it: a busy or unreachable store delays, never
        drops, a task's write. Cancelling the run (stop, lease lost) ends the retries."""
        delay = RETRY_DELAY_S_MIN
        while True:
            try:
                return await attempt()
            except StoreUnavailable as exc:
                logger.warning("could not %s (%s); retrying in %.2fs", what, exc, delay)
                await asyncio.sleep(delay)
                delay = min(RETRY_DELAY_S_MAX, delay * 2)

    async def set_status_message(
        self,
        task_id: str,
        message: str,
        *,
        epoch: int,
        principal: str | None = None,
        progress: Progress | None = None,
    ) -> None:
        """Record a progress message (real ``lastUpdatedAt``); best effort, never fatal."""
        try:
            changed = await self.store.set_status_message(
                task_id, message, now=self.clock(), epoch=epoch
            )
        except StoreUnavailable as exc:
            logger.warning("progress of task %s not stored: %s", task_id, exc)
            return
        if changed:
            self.hub.publish(task_id, principal, progress)

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
            or record.deleted
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
        expired = record is None or record.deleted or record.is_expired(self.clock())
        return task_id, expired

    async def wait_change(self, event: asyncio.Event) -> None:
        """Wait for a change this process saw, or for the store poll interval: a change made
        by another process sharing the store is seen within ``change_poll_s`` (D1)."""
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(self.options.change_poll_s):
                await event.wait()

    # ---- cancel --------------------------------------------------------------------------------

    async def cancel(self, record: TaskRecord) -> TaskRecord | None:
        """CAS to ``cancelled`` before anyone is told (S4); ``None`` if already terminal."""
        received = time.perf_counter()
        cancelled = await self.transition(
            record.task_id,
            Cause.CANCEL_REQUESTED,
            now=self.clock(),
            status_message="The task was cancelled by request.",
        )
        self.metrics.observe_cancel(
            cancelled=cancelled is not None, seconds=time.perf_counter() - received
        )
        if cancelled is not None:
            running = self._running.get(record.task_id)
            if running is not None:
                running.cancel()  # another process's run stops at its next lease renewal
            self.hub.publish(record.task_id, record.principal)
        return cancelled

    # ---- input -----------------------------------------------------------------------------

    async def wait_for_inputs(
        self, task_id: str, *, epoch: int, requests: list[tuple[int, str, Mapping[str, Any]]]
    ) -> dict[str, dict[str, Any]]:
        """Issue (or find, after a re-run) numbered input requests; wait for every answer (S6).

        ``requests`` are (sequence, the tool's key, request); a re-run asks the same
        sequence numbers, so an answered request is not asked again and an outstanding one
        keeps the key the client already saw. A run may wait in several of these at once
        (two ``elicit`` under ``asyncio.gather``): the task is ``input_required`` while any
        of them waits, and moves back to ``working`` once none of its requests is open.
        """
        parked = False
        try:
            while True:
                with self.hub.watch(task_id) as changed:
                    answers = await self._issue_inputs(task_id, epoch=epoch, requests=requests)
                    if len(answers) == len(requests):
                        if parked and not await self.outstanding_inputs(task_id):
                            # Back to working before the tool goes on. ``answer`` does
                            # the same once it has stored the last answer, but this run
                            # may see that answer first and end the task before then
                            # (it would go from input_required straight to its end):
                            # whichever comes first moves it, and the other changes
                            # nothing.
                            await self._input_status(
                                task_id, Cause.INPUT_ANSWERED, INPUT_RECEIVED, epoch=epoch
                            )
                        return answers
                    await self._input_status(
                        task_id, Cause.INPUT_REQUESTED, "Waiting for input.", epoch=epoch
                    )
                    if not parked:
                        parked = True
                        self._awaiting_input[task_id] += 1
                    await self.wait_change(changed)
        finally:
            if parked:
                self._awaiting_input[task_id] -= 1
                if not self._awaiting_input[task_id]:
                    del self._awaiting_input[task_id]

    async def _input_status(self, task_id: str, cause: Cause, message: str, *, epoch: int) -> None:
        """Park the run's task for input or resume it after (a compare-and-set under the
        run's epoch: ``None`` when the task is already there), and wake its waiters."""
        moved = await self.retrying(
            f"move task {task_id} ({cause.value})",
            lambda: self.transition(
                task_id, cause, now=self.clock(), status_message=message, epoch=epoch
            ),
        )
        if moved is not None:
            self.hub.publish(task_id, moved.principal)

    async def _issue_inputs(
        self, task_id: str, *, epoch: int, requests: list[tuple[int, str, Mapping[str, Any]]]
    ) -> dict[str, dict[str, Any]]:
        """Open each request (or find it open, or answered); the answers there are so far."""
        answers: dict[str, dict[str, Any]] = {}
        for sequence, name, request in requests:
            key = f"{sequence}.{secrets.token_hex(8)}"

            def issue(
                sequence: int = sequence,
                request: Mapping[str, Any] = request,
                key: str = key,
            ) -> Awaitable[InputRequest | None]:
                return self.store.open_input_request(
                    task_id,
                    sequence=sequence,
                    key=key,
                    method=str(request["method"]),
                    params=request["params"],
                    now=self.clock(),
                    epoch=epoch,
                )

            stored = await self.retrying(f"open input request {sequence} of task {task_id}", issue)
            if stored is None:
                raise asyncio.CancelledError  # fenced off: another run owns the task
            if stored.key == key:
                self.metrics.observe_inputs_asked("task")  # new, not found again
            if stored.response is not None:
                answers[name] = stored.response
        return answers

    async def answer(
        self, record: TaskRecord, responses: Mapping[str, Mapping[str, Any]]
    ) -> list[str]:
        """Store answers to outstanding keys (unknown/answered keys are ignored, S6)."""
        if record.status.is_terminal:
            return []
        answered = await self.store.answer_inputs(record.task_id, responses, now=self.clock())
        if answered and not await self.outstanding_inputs(record.task_id):
            await self.transition(
                record.task_id,
                Cause.INPUT_ANSWERED,
                now=self.clock(),
                status_message=INPUT_RECEIVED,
            )
        if answered:
            self.metrics.observe_inputs_answered("task", len(answered))
            self.hub.publish(record.task_id, record.principal)
        return answered

    async def wait_terminal(
        self, principal: Principal, task_id: str, protocol: ProtocolVersion
    ) -> TaskRecord:
        """Block until the task is terminal (2025-11-25 ``tasks/result``)."""
        while True:
            with self.hub.watch(task_id) as changed:
                record = await self.visible(principal, task_id, protocol)
                if record.status.is_terminal:
                    return record
                await self.wait_change(changed)

    @contextlib.asynccontextmanager
    async def watching(self, principal: str | None = None) -> AsyncIterator[Listener]:
        """Listen to changes of ``principal``'s tasks while the context is open (S7 push)."""
        with self.hub.listen(principal) as listener:
            yield listener


def _first_text(result: Mapping[str, Any]) -> str | None:
    for block in result.get("content") or []:
        if isinstance(block, dict) and block.get("type") == "text":
            return str(block.get("text"))
    return None
