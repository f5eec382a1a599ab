"""The public caller API: durable long-running tool calls from Python (SPEC O1, X2–X11).

Owns: :class:`Client`, an async context manager over one ledger whose executor it drives
itself; :class:`CallResult`, what a caller sees of one call node (state, outcome kind,
result, warnings, receipt); :class:`Progress`; the input callback path (the question and
its form handed to a callback or a person, answers checked before they are stored);
:class:`SyncClient` for scripts; and where the default ledger lives.

Must not: decide anything (the engine does), speak a protocol (the adapters do), or
print (the CLI does). Every wait here ends: with a settled call, at its timeout, or with
an error when the driver stops — never a silent hang.

A call node is the unit of idempotency (X2): calling a node again with the same server,
tool and arguments attaches to its operation (or returns its receipt) and never submits
twice; anything else on that node is refused.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import enum
import functools
import inspect
import json
import logging
import os
import re
import time
from collections.abc import Awaitable, Callable, Collection, Coroutine, Mapping
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any, Self, TypeVar
from urllib.parse import urlsplit

from longcall.adapters.base import ToolBinding
from longcall.adapters.servers import ServersConfig
from longcall.core import (
    OperationRecord,
    ResultKind,
    ServerStatus,
    State,
    TerminalReceipt,
)
from longcall.core.events import SETTLING, ReconciledManually, Resolution
from longcall.core.keys import canonical_json, digest_bytes, request_digest
from longcall.core.notfound import resubmit_repeats_refusal
from longcall.core.states import UNSUBMITTED_STATES
from longcall.errors import (
    CallNodeConflict,
    ClientNotStarted,
    DriverStopped,
    ExecutorFailed,
    InvalidAnswer,
    InvalidArguments,
    LedgerMissing,
    LongcallError,
    MissingCredential,
    NotReconcilable,
    NotWaitingForInput,
    ServerUnreachable,
    StaleEvent,
    SyncClientInLoop,
    VersionConflict,
)
from longcall.ledger import HistoryRow, Ledger, open_ledger
from longcall.runtime.engine import CallSpec
from longcall.runtime.inputs import (
    InputField,
    InputQuestion,
    InputRequest,
    answer_from_fields,
    pending_request,
)
from longcall.runtime.step import CancelOutcome, LedgerShell, check_version

if TYPE_CHECKING:
    # Loaded on first use: the executor pulls in the protocol adapters and the MCP SDK
    # (seconds), which commands that only read the ledger never need.
    from longcall.runtime.executor import AdapterFactory, Executor
    from longcall.runtime.webhooks import WebhookReceiver

log = logging.getLogger("longcall.client")

LEDGER_ENV = "LONGCALL_LEDGER"
"""Names the ledger when none is given; wins over the default location."""
WEBHOOK_SECRET_ENV = "LONGCALL_WEBHOOK_SECRET"
"""The webhook receiver's key(s) when none is passed (whsec_… or whpk_…, space-separated)."""
SUBMIT_WAIT_S = 120.0
"""``call(wait=False)`` returns once the server holds the operation, or after this long
(the record is durable either way; a driver resolves an in-doubt create by its key)."""
REACH_TIMEOUT_S = 5.0
"""How long a reachability check of a server that failed negotiation may take."""
CALLBACK_FLUSH_S = 5.0
"""At close, how long the callbacks of changes already seen may take to run."""
ENDED_REMEMBERED = 4096
"""Call nodes a client remembers as reported terminal (a change report's memory)."""

_T = TypeVar("_T")


# --- what a caller sees ---------------------------------------------------------------


class CallOutcome(enum.StrEnum):
    """What one call came to, in one word."""

    OK = "ok"
    """Accepted: the tool completed and returned a value (warnings may say more)."""
    TOOL_ERROR = "tool_error"
    """Accepted: the tool itself reported an error (MCP ``isError``, a failed run)."""
    PROTOCOL_ERROR = "protocol_error"
    """Accepted: the server answered with a protocol error (a JSON-RPC error)."""
    CANCELLED = "cancelled"
    """Accepted: the cancellation won and the server proved it."""
    NEEDS_PERSON = "needs_person"
    """Waiting for a person: an answer to an input request, or an operator to reconcile."""
    PENDING = "pending"
    """Still running (or being submitted): not settled yet."""


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class CallResult:
    """One call node as it stands: its state, its outcome and, once accepted, its result
    and receipt."""

    call_node_id: str
    outcome: CallOutcome
    state: State
    tool: str
    server: str
    protocol: str
    operation_id: str | None
    server_status: ServerStatus | None
    status_message: str | None
    result: Any
    """The accepted result, decoded from JSON (None until accepted)."""
    warnings: tuple[str, ...]
    """Warning outcomes, e.g. ``empty_result`` for a success with nothing in it (X6)."""
    receipt: TerminalReceipt | None
    reason: str | None
    """Why it needs a person, or the last error seen while retrying."""
    input: InputRequest | None
    """The questions of the input round waiting for an answer, if any."""
    record: OperationRecord
    replayed: bool = False
    """This call sent nothing: its call node was already accepted, and this is its
    receipt (X2). A new call of the same request needs another call node."""

    @property
    def ok(self) -> bool:
        """Accepted, completed, and not an error: the one outcome to advance on."""
        return self.outcome is CallOutcome.OK

    @property
    def structured(self) -> Any:
        """The result a program reads: an MCP tool result's ``structuredContent`` when
        it has one, else the accepted result as it is (None until accepted)."""
        if isinstance(self.result, dict) and "structuredContent" in self.result:
            return self.result["structuredContent"]
        return self.result

    @property
    def settled(self) -> bool:
        """Nothing more happens without a person: accepted, or waiting for one."""
        return self.outcome is not CallOutcome.PENDING

    def to_json(self) -> dict[str, Any]:
        """The receipt view: a JSON object for machines (``longcall … --json``)."""
        r = self.record
        return {
            "call_node_id": self.call_node_id,
            "outcome": self.outcome.value,
            "accepted_ok": self.ok,
            "state": self.state.value,
            "tool": self.tool,
            "server": self.server,
            "protocol": self.protocol,
            "operation_id": self.operation_id,
            "server_status": self.server_status.value if self.server_status else None,
            "server_status_raw": r.server_status_raw,
            "status_message": self.status_message,
            "result": self.result,
            "result_kind": r.result_kind.value if r.result_kind else None,
            "result_digest": self.receipt.result_digest if self.receipt else r.result_digest,
            "warnings": list(self.warnings),
            "receipt": self.receipt is not None,
            "replayed": self.replayed,
            "reason": self.reason,
            "input_round": r.input_round,
            "input_keys_pending": list(r.input_keys_pending),
            "input": _input_json(self.input),
            "cancel_generation": r.cancel_generation,
            "execution_epoch": r.execution_epoch,
            "effect_reconciliation_required": r.effect_reconciliation_required,
            "reconciliation_reason": r.reconciliation_reason,
            "resolved_by": r.resolved_by,
            "last_error": r.last_error,
        }


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class Progress:
    """A progress report of one call (X11): never a state change."""

    call_node_id: str
    fraction: float | None
    """Done so far in [0, 1]: from the server's progress notifications, else read from a
    status message such as ``step 3/20`` or ``40%``; None when unknown."""
    message: str | None
    server_unreachable: bool = False
    """The last request to the server failed; it is retried with backoff."""


ProgressCallback = Callable[[Progress], Awaitable[None] | None]
InputCallback = Callable[[InputRequest], Awaitable[Mapping[str, Any] | None]]
"""Given the pending questions; returns answers (key → answer, e.g. ``request.accept(
approved=True)`` or ``request.decline()``), or None to leave them to a person."""
ChangeCallback = Callable[[CallResult, State | None], Awaitable[None] | None]
"""Given a call's new state (or a new input round) and its state before."""


def outcome_of(record: OperationRecord) -> CallOutcome:
    """The one-word outcome of a stored record."""
    if record.is_terminal:
        return accepted_outcome(record.state, record.result_kind, record.server_status)
    if record.result_kind is ResultKind.CANCELLED:
        return CallOutcome.PENDING
    if record.state is State.RECONCILIATION_REQUIRED:
        return CallOutcome.NEEDS_PERSON
    if record.state is State.INPUT_REQUIRED and record.input_keys_pending:
        return CallOutcome.NEEDS_PERSON
    return CallOutcome.PENDING


def accepted_outcome(
    state: State, result_kind: ResultKind | None, server_status: ServerStatus | None
) -> CallOutcome:
    """The outcome of an accepted operation, from the three fields that decide it (a
    reader of many accepted rows need not decode whole records)."""
    if state is State.CANCELLED_ACCEPTED or result_kind is ResultKind.CANCELLED:
        return CallOutcome.CANCELLED
    if result_kind is ResultKind.PROTOCOL_ERROR:
        return CallOutcome.PROTOCOL_ERROR
    if result_kind is ResultKind.VALUE and server_status is ServerStatus.COMPLETED:
        return CallOutcome.OK
    return CallOutcome.TOOL_ERROR


def result_of(ledger: Ledger, record: OperationRecord) -> CallResult:
    """The caller's view of one stored record (reads its receipt, result and input)."""
    receipt = ledger.receipt(record.call_node_id) if record.is_terminal else None
    result: Any = None
    if record.is_terminal:
        payload = ledger.result_payload(record.call_node_id)
        if payload is not None:
            try:
                result = json.loads(payload)
            except ValueError:
                result = payload.decode("utf-8", "replace")
    outcome = outcome_of(record)
    reason = record.reconciliation_reason or (
        record.last_error if record.failed_attempts or outcome is CallOutcome.NEEDS_PERSON else None
    )
    return CallResult(
        call_node_id=record.call_node_id,
        outcome=outcome,
        state=record.state,
        tool=record.tool_name,
        server=record.server,
        protocol=record.protocol,
        operation_id=record.operation_id,
        server_status=record.server_status,
        status_message=record.status_message,
        result=result,
        warnings=record.warnings,
        receipt=receipt,
        reason=reason,
        input=pending_request(ledger, record) if record.input_keys_pending else None,
        record=record,
    )


_FRACTION = re.compile(r"(\d+(?:\.\d+)?)\s*(?:/|of)\s*(\d+(?:\.\d+)?)")
_PERCENT = re.compile(r"(\d+(?:\.\d+)?)\s*%")


def fraction_of(message: str | None) -> float | None:
    """Progress read from a status message (``step 3/20``, ``3 of 20``, ``40%``): the
    2026-07-28 task protocol carries progress only as such text."""
    if not message:
        return None
    match = _FRACTION.search(message)
    if match and float(match.group(2)) > 0:
        return max(0.0, min(1.0, float(match.group(1)) / float(match.group(2))))
    match = _PERCENT.search(message)
    if match:
        return max(0.0, min(1.0, float(match.group(1)) / 100.0))
    return None


# --- where the ledger lives -----------------------------------------------------------


def default_ledger_path() -> Path:
    """The ledger file used when none is named: in the user's data directory."""
    import platformdirs

    return platformdirs.user_data_path("longcall") / "ledger.db"


def default_ledger_url() -> str:
    """``$LONGCALL_LEDGER`` if set, else the SQLite file in the user's data directory."""
    return os.environ.get(LEDGER_ENV) or f"sqlite:///{default_ledger_path()}"


def _check_resolution(
    node: str, record: OperationRecord, how: Resolution, result: Any, *, now: float
) -> None:
    """Refuse a resolution that would be recorded and do nothing: a result with one
    that takes none, or ``resume`` where polling would stop again at once."""
    settles = how in SETTLING
    if result is not None and not settles:
        raise NotReconcilable(
            f"a result goes with completed, failed or cancelled; {how.value} takes none"
        )
    if how is Resolution.NEVER_CREATED and resubmit_repeats_refusal(record):
        raise NotReconcilable(
            f"{node!r}: the server refused this very request unread"
            f" ({record.reconciliation_reason}); resubmitting sends the same request and"
            " would be refused the same way again: settle it as failed"
        )
    ended_by = record.polling_ended_by(now) if how is Resolution.RESUME else None
    if ended_by is not None:
        raise NotReconcilable(
            f"{node!r}: its {ended_by} has passed, so polling would stop again at once;"
            " settle it as completed, failed or cancelled from what the server says"
        )


def _operator_kind(record: OperationRecord, how: Resolution, payload: bytes) -> ResultKind | None:
    """The kind of an operator's outcome, read from its bytes by the rules of the
    record's protocol: the same bytes are accepted as the same kind however they came."""
    if how not in SETTLING:
        return None
    # Here, not at the top: the readers load the protocols' mappings, which a program
    # that only imports the client must not pay for.
    from longcall.adapters.kinds import result_kind_of

    return result_kind_of(record.protocol, ServerStatus(how.value), payload)


def checked_arguments(arguments: Mapping[str, Any] | None) -> dict[str, Any]:
    """Tool arguments as a plain JSON object, or InvalidArguments saying why not."""
    if arguments is None:
        return {}
    if not isinstance(arguments, Mapping):
        raise InvalidArguments(f"tool arguments are a JSON object, not {type(arguments).__name__}")
    try:
        canonical_json(dict(arguments))
    except RecursionError:
        raise InvalidArguments("tool arguments are nested too deeply") from None
    except UnicodeEncodeError:
        raise InvalidArguments(
            "tool arguments contain a lone surrogate (not valid UTF-8)"
        ) from None
    except (ValueError, TypeError) as exc:
        raise InvalidArguments(f"tool arguments are not plain JSON: {exc}") from None
    return dict(arguments)


def default_node_id(tool: str, arguments: Mapping[str, Any]) -> str:
    """The call node of a call named by its tool and arguments alone."""
    return f"{tool}-{request_digest(tool, dict(arguments))[7:23]}"


# --- the client -----------------------------------------------------------------------


class Client:
    """Durable long-running tool calls, from Python.

    ``async with Client() as client:`` opens the ledger (the default one, a URL, or an
    open :class:`~longcall.ledger.Ledger`) and drives its calls in the background until
    the block ends. Leaving the block only stops local waiting: calls go on at their
    servers and resume with the next client or worker (X8, L7).
    """

    def __init__(
        self,
        ledger: str | Ledger | None = None,
        *,
        poll_qps_max: float = 20.0,
        on_progress: ProgressCallback | None = None,
        on_input: InputCallback | None = None,
        on_change: ChangeCallback | None = None,
        drive_all: bool = False,
        create_ledger: bool = True,
        refresh_interval_s: float = 1.0,
        request_timeout_s: float = 60.0,
        disabled_protocols: Collection[str] = (),
        adapter_factory: AdapterFactory | None = None,
        lease_s: float | None = None,
        servers: ServersConfig | None = None,
        announce: Callable[[str], None] | None = None,
        versions: Collection[tuple[str, str]] | None = None,
        push: bool = True,
        webhook_secret: str | None = None,
        webhook_tolerance_s: float = 300.0,
    ) -> None:
        """``push=False``: no push listener, only polling (for a client that returns
        once its calls are submitted). ``webhook_secret``: the key(s) a webhook receiver
        verifies deliveries with (``whsec_…`` or ``whpk_…``, several separated by spaces
        while rotating; default ``$LONGCALL_WEBHOOK_SECRET``), read when
        :meth:`webhook_receiver` is first asked for; ``webhook_tolerance_s``: how far a
        delivery's timestamp may be from now. ``versions``: the (protocol, adapter
        version) pairs this process runs; it drives only operations bound to one of them
        (default: every version).
        ``drive_all`` takes over every open operation of the ledger (a worker);
        otherwise only the nodes this client calls or waits on. ``create_ledger=False``
        refuses a ledger that does not exist yet (LedgerMissing). ``lease_s``: how long
        another worker waits before taking this one's operations over if it stops.
        ``servers``: servers known by name, with their credentials, poll caps and allowed
        tools (a servers file, C1). ``announce`` shows a person an authorization URL when
        an OAuth login needs one; without it such a login fails at once."""
        if not poll_qps_max > 0:
            raise ValueError(f"poll_qps_max must be above 0, not {poll_qps_max!r}")
        self._ledger_arg = ledger
        self._ledger: Ledger | None = ledger if not isinstance(ledger, str | None) else None
        self._owns_ledger = self._ledger is None
        self._create_ledger = create_ledger
        self.on_progress = on_progress
        self.on_input = on_input
        self.on_change = on_change
        self.drive_all = drive_all
        self._executor_options: dict[str, Any] = {
            "poll_qps_max": poll_qps_max,
            "refresh_interval_s": refresh_interval_s,
            "request_timeout_s": request_timeout_s,
            "disabled_protocols": disabled_protocols,
            "adopt_new": drive_all,
            "versions": versions,
            "push": push,
        }
        self.servers = servers or ServersConfig()
        self.announce = announce
        if adapter_factory is not None:
            self._executor_options["adapter_factory"] = adapter_factory
        self._executor_options["server_qps_max"] = {
            server.url: server.poll_qps_max
            for server in self.servers.servers.values()
            if server.poll_qps_max is not None
        }
        if lease_s is not None:
            from longcall.runtime.leases import LeasePolicy

            self._executor_options["lease"] = LeasePolicy.of(lease_s)
        self._executor: Executor | None = None
        self._webhook_secret = webhook_secret
        self._webhook_tolerance_s = webhook_tolerance_s
        self._webhook_receiver: WebhookReceiver | None = None
        self._runner: asyncio.Task[None] | None = None
        self._stop = asyncio.Event()
        self._waiters: dict[
            str, list[tuple[Callable[[OperationRecord], bool], asyncio.Future[None]]]
        ] = {}
        self._describing: dict[tuple[str, str, str | None], asyncio.Task[ToolBinding]] = {}
        """(server, tool, protocol) → the ``tools/list`` in flight for it, while it runs."""
        self._seen: dict[str, tuple[State, int, bool]] = {}
        """Per call node: the state, input round and unreachable flag last reported."""
        self._ended: dict[str, tuple[State, int, bool]] = {}
        """The last :data:`ENDED_REMEMBERED` call nodes reported terminal, out of
        ``_seen``: a change still queued for one when it was reported (its result fetch
        started, then its acceptance, read after both) reports nothing again."""
        self._left_to_person: dict[str, int] = {}
        """Per call node: the input round left to a person (no callback, or it deferred)."""
        self._asked: dict[str, int] = {}
        """Per call node: the input round handed to ``on_input``."""
        self._tasks: set[asyncio.Task[None]] = set()
        self._callbacks: asyncio.Queue[Coroutine[Any, Any, None]] | None = None
        self._observations: asyncio.Queue[str] | None = None
        """Call nodes the driver changed, handled in order by the observer task."""

    # --- webhooks ---------------------------------------------------------------------

    def webhook_receiver(self) -> WebhookReceiver:
        """The receiver of signed webhook deliveries for this client's operations: each
        verified one only wakes the poll of the operation it names (never an outcome).
        Mount ``receiver.asgi_app()`` (``POST /webhooks`` with the default keys, and
        ``POST /webhooks/NAME`` for each server with its own ``webhook`` keys in the
        servers file) or call ``receiver.handle(headers, body[, NAME])`` from your own
        framework. MissingCredential without any key."""
        if self._webhook_receiver is None:
            from longcall.adapters.webhooks import Verifier, parse_keys
            from longcall.runtime.webhooks import WebhookReceiver

            tolerance = self._webhook_tolerance_s
            text = self._webhook_secret or os.environ.get(WEBHOOK_SECRET_ENV, "")
            # A server with its own key(s) in the servers file: /webhooks/NAME.
            per_server = {
                server.name: (
                    server.url,
                    Verifier(parse_keys(server.webhook_keys()), tolerance_s=tolerance),
                )
                for server in self.servers.servers.values()
                if server.has_webhook_keys
            }
            if not text.strip() and not per_server:
                raise MissingCredential(
                    f"a webhook receiver needs a key: pass webhook_secret, set "
                    f"${WEBHOOK_SECRET_ENV} (whsec_… or whpk_…), or give a server a webhook"
                    " key in the servers file"
                )
            verifier = Verifier(parse_keys(text), tolerance_s=tolerance) if text.strip() else None
            self._webhook_receiver = WebhookReceiver(self.executor, verifier, servers=per_server)
        return self._webhook_receiver

    async def serve_webhooks(self, host: str, port: int) -> None:
        """Serve :meth:`webhook_receiver` as ``POST /webhooks`` on ``host:port`` until
        cancelled (WebhookPortUnavailable when it cannot listen there)."""
        from longcall.runtime.webhooks import listen_socket, serve

        receiver = self.webhook_receiver()
        await serve(receiver, listen_socket(host, port))

    # --- the ledger -------------------------------------------------------------------

    @property
    def ledger(self) -> Ledger:
        """The ledger (opened on first use)."""
        if self._ledger is None:
            if isinstance(self._ledger_arg, str):
                url = self._ledger_arg
            else:
                url = default_ledger_url()
                if self._create_ledger and not os.environ.get(LEDGER_ENV):
                    default_ledger_path().parent.mkdir(parents=True, exist_ok=True)
            self._ledger = open_ledger(url, create=self._create_ledger)
        return self._ledger

    @property
    def shell(self) -> LedgerShell:
        """The ledger as an operator writes it (cancel, answer, reconcile without a
        driver): the runtime's one path to it."""
        return LedgerShell(self.ledger)

    @property
    def executor(self) -> Executor:
        if self._executor is None:
            from longcall.runtime.executor import Executor

            options = dict(self._executor_options)
            if "adapter_factory" not in options:
                from longcall.adapters.routing import Connector
                from longcall.adapters.servers import default_token_dir

                # Credentials from the servers file, OAuth logins, and the sessions of
                # stateful servers kept in the ledger for every process of this caller.
                options["adapter_factory"] = Connector(
                    self.servers,
                    sessions=self.ledger,
                    token_dir=default_token_dir(),
                    announce=self.announce,
                )
            self._executor = Executor(
                self.ledger,
                on_progress=self._on_progress,
                on_change=self._observe,
                **options,
            )
        return self._executor

    def close(self) -> None:
        """Close the ledger if this client opened it (``async with`` does this)."""
        if self._ledger is not None and self._owns_ledger:
            self._ledger.close()
            self._ledger = None

    # --- the driver -------------------------------------------------------------------

    async def __aenter__(self) -> Self:
        try:
            await asyncio.to_thread(lambda: self.ledger)  # opened (and migrated) off the loop
            executor = self.executor
            self._stop.clear()
            self._callbacks = asyncio.Queue()
            self._observations = asyncio.Queue()
            self._spawn(self._run_callbacks())
            self._spawn(self._run_observations())
            if self.drive_all:
                await executor.aresume_all()
                for record in executor.held_records():
                    self._observe(record.call_node_id)
            self._runner = asyncio.create_task(executor.run(stop=self._stop))
            self._runner.add_done_callback(self._driver_done)
        except BaseException:
            self.close()
            raise
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Stop driving (calls go on at their servers) and close the ledger."""
        self._stop.set()
        try:
            if self._runner is not None:
                runner, self._runner = self._runner, None
                await asyncio.gather(runner, return_exceptions=True)
            if self._callbacks is not None and self._observations is not None:
                # Every change already seen reaches the callbacks (a worker's last log
                # line), within a bound: a callback that hangs cannot hold the exit.
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(CALLBACK_FLUSH_S):
                        await self._observations.join()
                        await self._callbacks.join()
            for task in list(self._tasks):
                task.cancel()
            if self._tasks:
                await asyncio.gather(*self._tasks, return_exceptions=True)
            if self._executor is not None:
                await self._executor.aclose()
                self._executor = None
        finally:
            self.close()

    def _driving(self) -> Executor:
        if self._runner is None:
            raise ClientNotStarted("use `async with Client(...) as client:` to call and wait")
        if self._runner.done():
            raise _stopped(self._runner)
        return self.executor

    def _driver_done(self, runner: asyncio.Task[None]) -> None:
        """The driver ended: every wait ends with DriverStopped, never a hang."""
        error = _stopped(runner)
        for waiters in self._waiters.values():
            for _predicate, future in waiters:
                if not future.done():
                    future.set_exception(error)
        self._waiters.clear()

    # --- calls ------------------------------------------------------------------------

    async def call(
        self,
        server: str,
        tool: str,
        arguments: Mapping[str, Any] | None = None,
        *,
        node: str | None = None,
        protocol: str | None = None,
        wait: bool = True,
        through_input: bool = False,
        budget_s: float | None = None,
        timeout_s: float | None = None,
    ) -> CallResult:
        """Call ``tool`` at ``server`` durably, as call node ``node`` (default: from the
        tool and arguments).

        With ``wait`` (the default) it returns once the call is settled — accepted, or
        waiting for a person — or at ``timeout_s`` (the call goes on). Without, it returns
        once the server holds the operation. ``through_input`` keeps waiting while a
        person answers elsewhere (``longcall ops answer``, another client). ``protocol``
        picks ``mcp``, an MCP version, ``aip-151`` or ``apify`` (default: from the URL,
        then negotiation); ``budget_s`` bounds the whole wait for the operation (X3).
        """
        executor = self._driving()
        args = checked_arguments(arguments)
        # A configured name, or a URL (C1): the record holds the URL, never a credential.
        target = self.servers.resolve(server)
        server, protocol = target.url, protocol or target.protocol
        node = node or default_node_id(tool, args)
        # The call's one lookup of its node: the executor and the engine take its answer.
        existing = await self._on_ledger(self.ledger.find, node)
        if existing is not None:
            _check_same_target(existing, server, protocol)
            await executor.aattach_to(existing, tool, args)
        else:
            binding = await self._bind(executor, server, tool, protocol)
            if _arguments_violation(binding, args) is not None:
                # The listing may be one read earlier in the session: arguments are
                # refused here only on what the server lists now.
                binding = await self._describe(executor, server, tool, protocol, fresh=True)
                _check_arguments(binding, args)
            await executor.acreate(
                CallSpec(call_node_id=node, binding=binding, arguments=args, budget_s=budget_s)
            )
        if existing is not None and existing.is_terminal:
            settled = await self._on_ledger(self.result, node)
            return dataclasses.replace(settled, replayed=True)
        if wait:
            return await self.wait(node, timeout_s=timeout_s, through_input=through_input)
        await self._until(node, _submitted, SUBMIT_WAIT_S if timeout_s is None else timeout_s)
        return await self._on_ledger(self.result, node)

    async def tools(self, server: str, *, protocol: str | None = None) -> list[dict[str, Any]]:
        """The tools ``server`` lists (a URL, or a configured name), as listed, each with
        ``taskSupport`` (forbidden, optional, required) as the negotiated protocol reads
        it; nothing is recorded. ServerUnreachable when it cannot be reached."""
        executor = self._driving()
        target = self.servers.resolve(server)
        url, protocol = target.url, protocol or target.protocol
        try:
            return await executor.tools(url, protocol=protocol)
        except Exception as exc:
            unreachable = await _unreachable(url)
            if unreachable is not None:
                raise ServerUnreachable(f"cannot reach {url}: {unreachable}") from exc
            raise

    async def wait(
        self, node: str, *, timeout_s: float | None = None, through_input: bool = False
    ) -> CallResult:
        """Drive ``node`` until it is settled (accepted, or waiting for a person), or
        until ``timeout_s`` (only local waiting ends, X8: the outcome says where it
        stands). With ``through_input``, a question left to a person does not end the
        wait: an answer given elsewhere (``longcall ops answer``, another client) is
        picked up and the call carried on."""
        executor = self._driving()
        await executor.aadopt(node)
        settled = _is_settled if through_input else self._settled
        await self._until(node, settled, timeout_s)
        return await self._on_ledger(self.result, node)

    async def drive(self, *, until_idle: bool = False) -> None:
        """Drive until cancelled (a worker), or with ``until_idle`` until nothing is left
        to do without a person. Raises DriverStopped if the driver fails."""
        executor = self._driving()
        runner = self._runner
        assert runner is not None
        while True:
            if until_idle and self._observations is not None:
                # Every change seen so far handled first: a new input round reaches the
                # callback before "nothing left to do" is judged.
                await self._observations.join()
            if until_idle and executor.is_idle() and not self._busy_with_input():
                return
            change = asyncio.ensure_future(executor.wait_change())
            try:
                await asyncio.wait({change, runner}, return_when=asyncio.FIRST_COMPLETED)
            finally:
                change.cancel()
            if runner.done():
                raise _stopped(runner)

    def result(self, node: str) -> CallResult:
        """The call node as it stands now (no waiting); raises UnknownCallNode. It reads
        the ledger on the calling thread: the client's own async methods never do."""
        return result_of(self.ledger, self.ledger.get(node))

    def results(self, *states: State) -> list[CallResult]:
        """Every call node of the ledger (in these states, if given), oldest first."""
        return [result_of(self.ledger, r) for r in self.ledger.list_by_state(*states)]

    def history(self, node: str) -> list[HistoryRow]:
        """Every committed version of the node's record: its timeline."""
        self.ledger.get(node)
        return self.ledger.history(node)

    async def cancel(self, node: str, *, expected_version: int | None = None) -> CancelOutcome:
        """Ask for cancellation and say what it achieved: ``requested`` (sent; polling
        finds the real terminal), ``cancelled``, ``already_terminal`` or
        ``not_cancellable`` (X5). Without a driver (``longcall ops cancel``) it is an
        operator's write, and the driver that holds the node sends it.

        With ``expected_version`` the write lands only on that version of the row: a row
        at another version, or one changed before the write commits, raises
        VersionConflict and nothing is written (no retry on a row the caller never saw)."""
        attempt = _once if expected_version is not None else _retrying
        if self._runner is not None and not self._runner.done():
            executor = self.executor
            return await attempt(lambda: executor.acancel(node, expected_version=expected_version))

        def as_operator() -> CancelOutcome:
            outcome, _ = self.shell.cancel(node, now=time.time(), expected_version=expected_version)
            return outcome

        return await attempt(lambda: self._on_ledger(as_operator))

    async def answer(
        self,
        node: str,
        answers: Mapping[str, Any] | None = None,
        *,
        fields: Mapping[str, str] | None = None,
        key: str | None = None,
        expected_version: int | None = None,
    ) -> CallResult:
        """Answer the node's pending input: ``answers`` maps keys to whole answers
        (``request.accept(approved=True)``), or ``fields`` gives a form's fields as text
        (``{"approved": "true"}``) for the one pending form (or ``key``'s). Each answer is
        checked against its form before it is stored (InvalidAnswer); the driver sends
        it (this client's, or a worker's on its next refresh). ``expected_version``: as
        for :meth:`cancel`, the answer is stored only on that version of the row."""
        record = await self._on_ledger(self.ledger.get, node)
        check_version(record, expected_version)
        request = await self._on_ledger(pending_request, self.ledger, record)
        if request is None:
            raise NotWaitingForInput(f"{node!r} waits for no input (it is {record.state.value})")
        if fields is not None:
            question = _question_for(request, key)
            answers = {question.key: answer_from_fields(question, fields)}
        elif answers is None:
            raise InvalidAnswer("give answers (key → answer) or fields")
        elif key is not None:
            answers = {key: answers}
        unknown = sorted(set(answers) - set(request.keys))
        if unknown:
            raise NotWaitingForInput(
                f"{node!r} waits for {', '.join(request.keys)}, not {', '.join(unknown)}"
            )
        checked = dict(answers)
        attempt = _once if expected_version is not None else _retrying
        if self._runner is not None and not self._runner.done():
            executor = self.executor
            await attempt(
                lambda: executor.aanswer(node, checked, expected_version=expected_version)
            )
            return await self._on_ledger(self.result, node)

        def as_operator() -> None:
            self.shell.answer(node, checked, now=time.time(), expected_version=expected_version)

        await attempt(lambda: self._on_ledger(as_operator))
        return await self._on_ledger(self.result, node)

    async def reconcile(
        self,
        node: str,
        resolution: str,
        *,
        note: str,
        actor: str,
        operation_id: str | None = None,
        result: Any = None,
        expected_version: int | None = None,
    ) -> CallResult:
        """Resolve a node waiting for an operator (X7), recorded with who and why:
        ``resume`` (polling goes on), ``never_created`` (resubmit with the same key), or
        ``completed`` / ``failed`` / ``cancelled`` with ``result`` as the outcome.
        ``expected_version``: as for :meth:`cancel` (the resolution is always written
        against the row it read, never retried)."""
        record = await self._on_ledger(self.ledger.get, node)
        check_version(record, expected_version)
        if record.state is not State.RECONCILIATION_REQUIRED:
            raise NotReconcilable(
                f"{node!r} is {record.state.value}: only an operation waiting for an"
                " operator can be reconciled"
            )
        try:
            how = Resolution(resolution)
        except ValueError:
            choices = ", ".join(r.value for r in Resolution)
            raise NotReconcilable(f"no resolution {resolution!r} (use {choices})") from None
        _check_resolution(node, record, how, result, now=time.time())
        try:
            payload = canonical_json(
                result if result is not None else {"resolution": how.value, "note": note}
            )
        except (ValueError, TypeError, RecursionError, UnicodeEncodeError) as exc:
            raise InvalidArguments(f"the result is not plain JSON: {exc}") from None
        try:
            event = ReconciledManually(
                resolution=how,
                actor=actor,
                note=note,
                operation_id=operation_id,
                result_digest=digest_bytes(payload),
                result_kind=_operator_kind(record, how, payload),
            )
        except ValueError as exc:
            raise NotReconcilable(str(exc)) from None
        try:
            await self._on_ledger(
                functools.partial(
                    self.shell.reconcile, record, event, now=time.time(), result_payload=payload
                )
            )
        except StaleEvent as exc:
            raise NotReconcilable(f"{node!r}: {exc}") from None
        if self._runner is not None and not self._runner.done():
            await self.executor.aadopt(node)  # drive it on from here (resume, resubmit)
        return await self._on_ledger(self.result, node)

    def input_request(self, node: str) -> InputRequest | None:
        """The questions the node waits for, or None."""
        return pending_request(self.ledger, self.ledger.get(node))

    # --- internals ----------------------------------------------------------------------

    async def _on_ledger(self, fn: Callable[..., _T], *args: Any) -> _T:
        """Run a ledger read (or an operator's write) beside the event loop: on the
        driver's ledger thread while it drives, else on a worker thread. The loop never
        waits for the ledger — a commit's fsync, or the lock the driver's write holds —
        so the driver's other requests leave on time (D1)."""
        if self._executor is not None:
            return await self._executor.on_ledger_thread(fn, *args)
        return await asyncio.to_thread(fn, *args)

    async def _bind(
        self, executor: Executor, server: str, tool: str, protocol: str | None
    ) -> ToolBinding:
        """The tool's binding, described by the server (X1). Calls made together share
        the one description in flight for that tool instead of one each. A description
        is a ``tools/list`` unless the adapter holds a listing of the tool it may serve
        again (nothing said the list changed since, and no hint in it decides what is
        done with a call: ``adapters.mcp.common.hints_may_age``); otherwise a call made
        after one finished describes the tool again, so no call is made with hints
        (idempotency, read-only, task support) older than its own start."""
        key = (server, tool, protocol)
        describing = self._describing.get(key)
        if describing is None:
            describing = asyncio.ensure_future(self._describe(executor, server, tool, protocol))
            self._describing[key] = describing
            describing.add_done_callback(functools.partial(self._described, key))
        # Shielded: one caller giving up does not cancel the description the others await.
        return await asyncio.shield(describing)

    def _described(self, key: tuple[str, str, str | None], task: asyncio.Task[ToolBinding]) -> None:
        if self._describing.get(key) is task:
            del self._describing[key]
        if not task.cancelled():
            task.exception()  # retrieved: a failure nobody awaits any more is not "lost"

    async def _describe(
        self,
        executor: Executor,
        server: str,
        tool: str,
        protocol: str | None,
        *,
        fresh: bool = False,
    ) -> ToolBinding:
        try:
            return await executor.bind(server, tool, protocol=protocol, fresh=fresh)
        except Exception as exc:
            unreachable = await _unreachable(server)
            if unreachable is not None:
                raise ServerUnreachable(f"cannot reach {server}: {unreachable}") from exc
            if isinstance(exc, LongcallError):
                raise
            raise ServerUnreachable(f"{server}: {type(exc).__name__}: {exc}") from exc

    def _settled(self, record: OperationRecord) -> bool:
        if record.is_settled:
            return True
        return (
            record.waits_for_answers
            and self._left_to_person.get(record.call_node_id) == record.input_round
        )

    async def _until(
        self, node: str, predicate: Callable[[OperationRecord], bool], timeout_s: float | None
    ) -> None:
        """Wait until the node's record satisfies ``predicate`` (re-checked after each
        change the driver reports), up to ``timeout_s``."""
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        waiters = self._waiters.setdefault(node, [])
        entry = (predicate, future)
        # Waiting before reading: a change handled while the read runs finds the waiter.
        waiters.append(entry)
        try:
            if predicate(await self._current(node)):
                return
            async with asyncio.timeout(timeout_s):
                await future
        except TimeoutError:
            pass  # only local waiting ends (X8); the caller sees PENDING
        finally:
            if entry in waiters:
                waiters.remove(entry)

    async def _current(self, node: str) -> OperationRecord:
        known = self._executor.latest(node) if self._executor else None
        return known if known is not None else await self._on_ledger(self.ledger.get, node)

    def _observe(self, node: str) -> None:
        """From the driver, on the loop: ``node`` changed (or a change was noticed). The
        observer task handles it in order, reading the ledger beside the loop."""
        if self._observations is not None:
            self._observations.put_nowait(node)

    async def _run_observations(self) -> None:
        assert self._observations is not None
        while True:
            node = await self._observations.get()
            try:
                await self._handle_change(node)
            except Exception:  # one node's read must not end the others' reports
                log.exception("%s: the change could not be reported", node)
            finally:
                self._observations.task_done()

    async def _handle_change(self, node: str) -> None:
        """Wake the node's waiters, hand a new input round to the callback, report
        state changes and unreachability."""
        record = await self._current(node)
        await self._handle_input(record)
        waiters = self._waiters.get(node)
        if waiters:
            for predicate, future in list(waiters):
                if not future.done() and predicate(record):
                    future.set_result(None)
        unreachable = record.failed_attempts > 0 and record.last_error is not None
        now = (record.state, record.input_round, unreachable)
        before = self._seen.get(node) or self._ended.get(node)
        if before == now:
            return
        if record.is_terminal:
            self._seen.pop(node, None)
            self._ended[node] = now
            if len(self._ended) > ENDED_REMEMBERED:
                del self._ended[next(iter(self._ended))]  # the oldest
        else:
            self._seen[node] = now
        if self.on_change is not None and (before is None or before[:2] != now[:2]):
            result = await self._on_ledger(result_of, self.ledger, record)
            self._emit(self.on_change, result, before[0] if before else None)
        # A node first seen failing (a worker adopting it while its server is down) is
        # reported too: an unseen node counts as reachable.
        if self.on_progress is not None and (before[2] if before else False) != unreachable:
            self._emit(
                self.on_progress,
                Progress(
                    call_node_id=node,
                    fraction=None,
                    message=record.last_error if unreachable else record.status_message,
                    server_unreachable=unreachable,
                ),
            )

    async def _handle_input(self, record: OperationRecord) -> None:
        node = record.call_node_id
        if not record.waits_for_answers:
            return
        round_ = record.input_round
        if self._asked.get(node) == round_ or self._left_to_person.get(node) == round_:
            return
        if self.on_input is None:
            self._left_to_person[node] = round_
            return
        request = await self._on_ledger(pending_request, self.ledger, record)
        if request is None:  # pragma: no cover - pending keys always make a request
            return
        self._asked[node] = round_
        self._spawn(self._ask(request))

    async def _ask(self, request: InputRequest) -> None:
        node = request.call_node_id
        assert self.on_input is not None
        answers: Mapping[str, Any] | None = None
        try:
            answers = await self.on_input(request)
            if answers:
                await self.executor.aanswer(node, answers)
                return
        except LongcallError as exc:
            log.warning("%s: the input callback's answer was refused: %s", node, exc)
        except Exception:
            log.exception("%s: the input callback failed", node)
        finally:
            self._asked.pop(node, None)
        # Deferred (or refused): a person answers; waits on the node settle now.
        self._left_to_person[node] = request.input_round
        self._observe(node)

    def _busy_with_input(self) -> bool:
        return bool(self._asked)

    def _on_progress(self, node: str, fraction: float | None, message: str | None) -> None:
        if self.on_progress is not None:
            fraction = fraction if fraction is not None else fraction_of(message)
            self._emit(
                self.on_progress, Progress(call_node_id=node, fraction=fraction, message=message)
            )

    def _emit(self, callback: Callable[..., Awaitable[None] | None], *args: Any) -> None:
        """Call a user callback in order with the others; an async one is awaited by the
        callback task, so a slow callback never stalls the driver."""
        if self._callbacks is None:
            return
        self._callbacks.put_nowait(_call_back(callback, *args))

    async def _run_callbacks(self) -> None:
        assert self._callbacks is not None
        while True:
            callback = await self._callbacks.get()
            try:
                await callback
            finally:
                self._callbacks.task_done()

    def _spawn(self, coroutine: Coroutine[Any, Any, None]) -> None:
        task = asyncio.create_task(coroutine)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)


async def _call_back(callback: Callable[..., Awaitable[None] | None], *args: Any) -> None:
    try:
        outcome = callback(*args)
        if inspect.isawaitable(outcome):
            await outcome
    except Exception:
        log.exception("a %s callback failed", getattr(callback, "__name__", "client"))


CONFLICT_RETRIES = 5
"""A local intent (cancel, answer) that loses a race with a driver writing the same row
is decided again on the fresh row this many times (L4: never an overwrite)."""


async def _retrying(intent: Callable[[], Awaitable[_T]]) -> _T:
    for _attempt in range(CONFLICT_RETRIES - 1):
        try:
            return await intent()
        except VersionConflict:  # only the lost compare-and-set race
            continue
    return await intent()


async def _once(intent: Callable[[], Awaitable[_T]]) -> _T:
    """The intent decided on the row as the caller saw it: a lost race is refused."""
    return await intent()


def _stopped(runner: asyncio.Task[None]) -> DriverStopped:
    if runner.cancelled() or runner.exception() is None:
        return DriverStopped("the client's driver stopped: the client was closed")
    cause = runner.exception()
    if isinstance(cause, ExecutorFailed):
        error = DriverStopped(str(cause))
    else:
        error = DriverStopped(f"the client's driver stopped: {type(cause).__name__}: {cause}")
    error.__cause__ = cause
    return error


def _is_settled(record: OperationRecord) -> bool:
    return record.is_settled


def _submitted(record: OperationRecord) -> bool:
    return record.state not in UNSUBMITTED_STATES


def _question_for(request: InputRequest, key: str | None) -> InputQuestion:
    if key is not None:
        try:
            return request.question(key)
        except KeyError:
            raise NotWaitingForInput(
                f"{request.call_node_id!r} waits for {', '.join(request.keys)}, not {key!r}"
            ) from None
    forms = [q for q in request.questions if q.is_form]
    if len(request.questions) == 1:
        return request.questions[0]
    if len(forms) == 1:
        return forms[0]
    raise InvalidAnswer(
        f"{request.call_node_id!r} waits for {len(request.questions)} inputs"
        f" ({', '.join(request.keys)}): name one with its key"
    )


def _family(protocol: str) -> str:
    from longcall.adapters.routing import AIP151, ALIASES, APIFY, MCP

    alias = ALIASES.get(protocol.lower())
    if alias is not None:
        return alias
    return AIP151 if protocol == AIP151 else APIFY if protocol == APIFY else MCP


def _check_same_target(record: OperationRecord, server: str, protocol: str | None) -> None:
    """A call node is one request: the same tool and arguments (the engine checks those)
    at the same server, over the same protocol."""
    if _normal_url(record.server) != _normal_url(server):
        raise CallNodeConflict(
            f"call node {record.call_node_id!r} was called at {record.server};"
            f" this call names {server} (a call node is one request: use another node)"
        )
    from longcall.adapters.routing import MCP, protocol_of_url

    wanted = protocol or protocol_of_url(server)
    bound = record.protocol
    same = _family(wanted) == _family(bound) and (
        _family(wanted) != MCP or wanted.lower() == MCP or bound.startswith(wanted)
    )
    if not same:
        raise CallNodeConflict(
            f"call node {record.call_node_id!r} is bound to protocol {bound};"
            f" this call asks for {wanted} (a call node is one request: use another node)"
        )


def _arguments_violation(binding: ToolBinding, arguments: Mapping[str, Any]) -> str | None:
    """Why the tool's input schema refuses ``arguments``, or None.

    A top-level null is judged as if the argument were left out: MCP hosts send null for
    "not given" (SEP-2243 omits its header), and servers take it so; the server has the
    final word on it."""
    if binding.input_schema is None:
        return None
    from longcall.adapters.binding import arguments_violation

    given = {name: value for name, value in arguments.items() if value is not None}
    return arguments_violation(given, binding.input_schema)


def _check_arguments(binding: ToolBinding, arguments: Mapping[str, Any]) -> None:
    """Arguments the tool's own input schema refuses are refused before anything is
    recorded or sent (InvalidArguments): a call the server would refuse at once would
    spend its call node on that refusal. What the schema allows, the server judges."""
    why = _arguments_violation(binding, arguments)
    if why is not None:
        raise InvalidArguments(
            f"{binding.tool_name}: the arguments do not fit the tool's input schema: {why}"
            f" (nothing was sent; see the schema with: longcall tools {binding.server}"
            f" {binding.tool_name})"
        )


def _normal_url(url: str) -> str:
    parts = urlsplit(url)
    return f"{parts.scheme.lower()}://{parts.netloc.lower()}{parts.path.rstrip('/')}"


async def _unreachable(url: str) -> str | None:
    """Why a TCP connection to the server cannot be opened, or None when it can."""
    parts = urlsplit(url)
    if parts.hostname is None:
        return "the URL names no host"
    port = parts.port or (443 if parts.scheme == "https" else 80)
    try:
        async with asyncio.timeout(REACH_TIMEOUT_S):
            _reader, writer = await asyncio.open_connection(parts.hostname, port)
    except TimeoutError:
        return f"no answer from {parts.hostname}:{port} within {REACH_TIMEOUT_S:g} s"
    except OSError as exc:
        return os.strerror(exc.errno) if exc.errno else str(exc)
    writer.close()
    with contextlib.suppress(OSError):
        await writer.wait_closed()
    return None


def _input_json(request: InputRequest | None) -> dict[str, Any] | None:
    if request is None:
        return None
    return {
        "input_round": request.input_round,
        "questions": [
            {
                "key": q.key,
                "method": q.method,
                "message": q.message,
                "schema": q.schema,
                "fields": [dataclasses.asdict(f) for f in q.fields],
            }
            for q in request.questions
        ],
    }


def _refuse_a_running_loop() -> None:
    """SyncClient blocks on a loop of its own: where one already runs (a notebook, an
    async function) that cannot be, so say what to use instead."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return
    raise SyncClientInLoop(
        "SyncClient cannot run inside a running event loop (a Jupyter notebook, an async"
        " function): use `async with longcall.Client(...) as client:` and await its"
        " methods there"
    )


# --- for scripts ----------------------------------------------------------------------


class SyncClient:
    """The same calls, blocking, for scripts: ``with SyncClient() as client:``.

    It runs a :class:`Client` on a private event loop; calls are driven while one of its
    methods runs, and (being durable) go on at their servers in between."""

    def __init__(self, ledger: str | Ledger | None = None, **options: Any) -> None:
        _refuse_a_running_loop()
        self._client = Client(ledger, **options)
        self._loop = asyncio.Runner()

    def __enter__(self) -> Self:
        try:
            self._loop.run(self._client.__aenter__())
        except BaseException:
            self._loop.close()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        try:
            self._loop.run(self._client.aclose())
        finally:
            self._loop.close()

    def _run(self, coroutine: Coroutine[Any, Any, _T]) -> _T:
        try:
            _refuse_a_running_loop()
        except SyncClientInLoop:
            coroutine.close()
            raise
        return self._loop.run(coroutine)

    def call(
        self,
        server: str,
        tool: str,
        arguments: Mapping[str, Any] | None = None,
        **options: Any,
    ) -> CallResult:
        """:meth:`Client.call`, blocking."""
        return self._run(self._client.call(server, tool, arguments, **options))

    def wait(
        self, node: str, *, timeout_s: float | None = None, through_input: bool = False
    ) -> CallResult:
        """:meth:`Client.wait`, blocking."""
        return self._run(self._client.wait(node, timeout_s=timeout_s, through_input=through_input))

    def result(self, node: str) -> CallResult:
        return self._client.result(node)

    def cancel(self, node: str) -> CancelOutcome:
        return self._run(self._client.cancel(node))

    def answer(
        self, node: str, answers: Mapping[str, Any] | None = None, **options: Any
    ) -> CallResult:
        return self._run(self._client.answer(node, answers, **options))


__all__ = [
    "CallNodeConflict",
    "CallOutcome",
    "CallResult",
    "CancelOutcome",
    "ChangeCallback",
    "Client",
    "ClientNotStarted",
    "DriverStopped",
    "InputCallback",
    "InputField",
    "InputQuestion",
    "InputRequest",
    "InvalidAnswer",
    "InvalidArguments",
    "LedgerMissing",
    "NotReconcilable",
    "NotWaitingForInput",
    "Progress",
    "ProgressCallback",
    "ServerUnreachable",
    "SyncClient",
    "SyncClientInLoop",
    "accepted_outcome",
    "default_ledger_url",
    "fraction_of",
    "outcome_of",
    "result_of",
]
