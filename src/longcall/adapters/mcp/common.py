"""What both MCP task versions read alike (X2, X5, X7, X9, X11, C3).

Owns: JSON-RPC errors classified by a caller's per-version table (the tables are each
version's; only the reading around them is shared), the three outcomes of a failed
create (lost, failed, rejected), the not-found answer to ``tasks/*``, the
submission-key lookup, the identity check of every task body we read (C3), the
cancelled-status evidence, progress from ``notifications/progress``, and the small
readers of wire durations and strings.

Must not: perform I/O, or decide what a status means (each version's mapping does).
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping
from typing import Any

from longcall.adapters.base import Outcome, ProgressSink, ToolBinding
from longcall.adapters.binding import binding_of
from longcall.adapters.exchange import Exchange, SseEvent, TransportFailure
from longcall.adapters.mcp.results import error_body
from longcall.adapters.mcp.rpc import (
    DEFAULT_LOOKUP_METHOD,
    SUBMISSION_KEY_EXTENSION,
    RpcChannel,
    RpcReply,
)
from longcall.adapters.mcp.tools import listed_tool, listed_tools, task_support_of, tool_binding
from longcall.adapters.outcomes import foreign_identity, submit_failed, unsupported
from longcall.adapters.outcomes import request_failed as transport_request_failed
from longcall.core.events import (
    CancellationObserved,
    OperationNotFound,
    RequestFailed,
    ResultFetchFailed,
    SubmissionFound,
    SubmissionNeverCreated,
    SubmitOutcomeLost,
    SubmitRejected,
)
from longcall.core.keys import canonical_json, digest_bytes
from longcall.core.record import ServerStatus
from longcall.core.retry import FailureKind, RequestKind

STATUSES: Mapping[str, ServerStatus] = {status.value: status for status in ServerStatus}
"""The task statuses both versions share (L3: kept beside our own states)."""

JsonRpcTable = Mapping[int, FailureKind]


def jsonrpc_failure(failures: JsonRpcTable, code: Any) -> FailureKind:
    """A JSON-RPC error code as a failure kind by ``failures``; an unknown or missing
    code is not retried (BAD_REQUEST)."""
    if not isinstance(code, int):
        return FailureKind.BAD_REQUEST
    return failures.get(code, FailureKind.BAD_REQUEST)


def error_detail(error: Mapping[str, Any]) -> str:
    """How a JSON-RPC error reads in an event's detail or reason."""
    return f"JSON-RPC {error.get('code')}: {error.get('message')}"


def request_failed(
    request: RequestKind,
    failure: RpcReply,
    failures: JsonRpcTable,
    *,
    poll_interval_s: float | None = None,
) -> Outcome:
    """A request-level failure as ``RequestFailed`` (X9); a JSON-RPC error is classified
    by the caller's table ``failures``. ``poll_interval_s``: the interval an earlier
    reply of the same exchange gave (it still floors the retry, X3)."""
    if isinstance(failure, TransportFailure):
        return transport_request_failed(request, failure, poll_interval_s=poll_interval_s)
    error = failure.error or {}
    return Outcome(
        event=RequestFailed(
            request=request,
            failure=jsonrpc_failure(failures, error.get("code")),
            detail=error_detail(error),
            poll_interval_s=poll_interval_s,
        )
    )


def fetch_failed(failure: TransportFailure, failures: JsonRpcTable) -> Outcome:
    """A result fetch without an answer: a truncated or garbled body is
    ``ResultFetchFailed`` (retryable, X6); any other failure is the request's (X9)."""
    if failure.kind in (FailureKind.MALFORMED_RESPONSE, FailureKind.TRANSPORT):
        return Outcome(
            event=ResultFetchFailed(
                reason=f"result truncated or malformed: {failure.detail}",
                retryable=True,
                retry_after_s=failure.retry_after_s,
            )
        )
    return request_failed(RequestKind.FETCH, failure, failures)


def may_have_created(code: Any) -> bool:
    """An internal or implementation-defined server error may strike after the task was
    created, so a create answered with one is ambiguous (X2)."""
    return code == -32603 or (isinstance(code, int) and -32099 <= code <= -32000)


def submit_failure(
    failure: RpcReply, *, failures: JsonRpcTable, rejecting_codes: frozenset[int]
) -> Outcome:
    """X2: a failed create is lost (ambiguous), failed (proved unprocessed) or rejected
    (a JSON-RPC error in ``rejecting_codes`` answering our create is the outcome: kept
    as evidence)."""
    if isinstance(failure, TransportFailure):
        return submit_failed(failure)
    error = failure.error or {}
    code = error.get("code")
    if code in rejecting_codes:
        payload = canonical_json(error_body(error))
        return Outcome(
            event=SubmitRejected(reason=error_detail(error), result_digest=digest_bytes(payload)),
            payload=payload,
        )
    if may_have_created(code):
        return Outcome(event=SubmitOutcomeLost(reason=error_detail(error)))
    return request_failed(RequestKind.SUBMIT, failure, failures)


def task_request_failed(request: RequestKind, failure: RpcReply, failures: JsonRpcTable) -> Outcome:
    """A failed ``tasks/*`` request. -32602 answering OUR request says the task is
    unknown, expired or another principal's (all answered alike, X7) in both versions;
    any other failure is the request's own (X9)."""
    if not isinstance(failure, TransportFailure) and (failure.error or {}).get("code") == -32602:
        return Outcome(event=OperationNotFound(detail=str((failure.error or {}).get("message"))))
    return request_failed(request, failure, failures)


def check_task_identity(
    request: RequestKind, task: Mapping[str, Any], task_id: str, *, required: bool
) -> Outcome | None:
    """C3: a task body that names another task is not ours (never read as ours). With
    ``required``, a body that names no task is refused too (2025-11-25 ``tasks/get``
    answers always carry ``taskId``)."""
    named = task.get("taskId")
    if named is None and not required:
        return None
    if named != task_id:
        return foreign_identity(
            request, f"asked about task {task_id!r}, the server answered for {named!r}"
        )
    return None


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class TaskStatus:
    """A task body read as ours: its status, the wire word, message and poll interval."""

    status: ServerStatus
    raw: str
    message: str | None
    interval_s: float | None


def task_status(
    task: Mapping[str, Any], task_id: str, *, interval_key: str
) -> TaskStatus | Outcome:
    """A ``tasks/get`` body as a :class:`TaskStatus`, or why it cannot be read as ours:
    another task's (C3) or an unknown status. ``interval_key`` is the version's name for
    the poll interval (it rides on every status, input_required included: X3)."""
    foreign = check_task_identity(RequestKind.POLL, task, task_id, required=True)
    if foreign is not None:
        return foreign
    raw = task.get("status")
    status = STATUSES.get(str(raw))
    if status is None:
        return Outcome(
            event=RequestFailed(
                request=RequestKind.POLL,
                failure=FailureKind.MALFORMED_RESPONSE,
                detail=f"tasks/get answered status {raw!r} for task {task_id!r}",
            )
        )
    return TaskStatus(
        status=status,
        raw=str(raw),
        message=text_or_none(task.get("statusMessage")),
        interval_s=ms_to_s(task.get(interval_key)),
    )


class BindingCache:
    """A task version's tool bindings (X1): ``tools/list`` read into a binding, made on
    first use. The version says what an unflagged tool supports (2026-07-28: the server
    decides per request, so ``optional``; 2025-11-25: ``forbidden``).

    A binding listed earlier serves a later :meth:`bind` without a ``tools/list`` only
    where the version allows it (``reuses_listing``), nothing has said the list may have
    changed since (the channel's ``tools_epoch``: a ``notifications/tools/list_changed``,
    a new session), no create of that tool was refused since (:meth:`forget_listing`),
    and no hint in it could change what is done with a call (:func:`hints_may_age`)."""

    url: str
    channel: RpcChannel
    protocol: str
    version: str
    submission_lookup: bool
    bindings: dict[str, ToolBinding]
    listed_at: dict[str, int]
    """Tool name → the channel's ``tools_epoch`` its reusable binding was listed at."""
    store_id: str | None
    unflagged_support = "forbidden"
    reuses_listing = False
    """Whether this version may serve a binding listed earlier (see the class)."""

    def bind(self, tool_name: str) -> Exchange[ToolBinding]:
        listed = self._listed_earlier(tool_name)
        if listed is not None:
            return listed
        epoch = self.channel.tools_epoch
        meta = self.channel.dialect.meta("tools/list", consent=True) or None
        tool = yield from listed_tool(self.channel, meta, tool_name, url=self.url)
        binding = tool_binding(
            self.url,
            tool_name,
            tool,
            protocol=self.protocol,
            adapter_version=self.version,
            task_support=task_support_of(tool) or self.unflagged_support,
            submission_lookup=self.submission_lookup,
            store_id=self.store_id,
        )
        self.bindings[tool_name] = binding
        if self.reuses_listing and hints_may_age(binding):
            self.listed_at[tool_name] = epoch
        return binding

    def forget_listing(self, tool_name: str) -> None:
        """The next :meth:`bind` of ``tool_name`` lists the tools again (a create of it
        was refused, or its arguments were refused against the listing held)."""
        self.listed_at.pop(tool_name, None)

    def _listed_earlier(self, tool_name: str) -> ToolBinding | None:
        epoch = self.listed_at.get(tool_name)
        if epoch is None or epoch != self.channel.tools_epoch:
            return None
        return self.bindings.get(tool_name)

    def tools(self) -> Exchange[list[dict[str, Any]]]:
        """Every tool the server lists, each with its task support as this version
        reads it (an unflagged tool: ``unflagged_support``)."""
        meta = self.channel.dialect.meta("tools/list", consent=True) or None
        return (yield from listed_tools(self.channel, meta, self.unflagged_support, url=self.url))

    def _binding(self, tool_name: str) -> Exchange[ToolBinding | None]:
        """The tool's binding, made on first use; None when the tool cannot be described
        (a result is then verified without an output schema)."""
        return binding_of(self.bindings, self.bind, tool_name)


def hints_may_age(binding: ToolBinding) -> bool:
    """Whether a call may be made on this binding listed earlier in the session: no hint
    in it decides anything a fresher listing could decide otherwise.

    * the server offers the submission-key lookup: a create whose fate is unknown is
      looked up by its key, never sent again on the idempotency hint (X2), so a tool
      that dropped that hint since cannot see a lost create resubmitted;
    * the tool is not read-only: only a read-only tool's call is copied to a shadow
      version (R1), and a hint that has since gone would copy a call with effects;
    * it takes no argument as a header (SEP-2243): a declaration changed since would
      send the wrong headers.

    The arguments are still checked against the listed input schema before anything is
    recorded; a refusal there is confirmed by a fresh listing (the client's ``call``)."""
    return binding.submission_lookup and not binding.read_only and not binding.header_params


def submission_lookup_of(offered: Any) -> tuple[bool, str, str | None]:
    """Whether a server's capability section (``extensions`` in 2026-07-28,
    ``experimental`` in 2025-11-25) offers the submission-key lookup (X2, S3), the
    method to call for it, and the identity of the store it speaks for (C5)."""
    offered = offered if isinstance(offered, Mapping) else {}
    submission = offered.get(SUBMISSION_KEY_EXTENSION)
    if not isinstance(submission, Mapping):
        return False, DEFAULT_LOOKUP_METHOD, None
    method = submission.get("lookupMethod")
    store = submission.get("storeId")
    return (
        True,
        method if isinstance(method, str) else DEFAULT_LOOKUP_METHOD,
        store if isinstance(store, str) and store else None,
    )


def lookup_unsupported() -> Outcome:
    """A lookup asked of a server that offers none: a refusal never worth retrying."""
    return unsupported(RequestKind.LOOKUP, "the server offers no lookup by submission key")


def lookup_answer(
    answer: RpcReply, failures: JsonRpcTable, *, submitted_to: str | None = None
) -> Outcome:
    """X2: what a submission-key lookup proves: the task exists (its id), it was never
    created, or nothing (a failed or malformed answer). "Never created" is proof only
    from the store the submission went to (``submitted_to``, C5): another store — the
    old one deleted, replaced, restored from a backup — forgot, it did not never know."""
    if isinstance(answer, TransportFailure) or answer.error is not None:
        return request_failed(RequestKind.LOOKUP, answer, failures)
    result = answer.result or {}
    if result.get("found") is True and isinstance(result.get("taskId"), str):
        return Outcome(event=SubmissionFound(operation_id=result["taskId"]))
    if result.get("found") is False:
        store = result.get("storeId")
        if submitted_to is not None and store != submitted_to:
            return foreign_identity(
                RequestKind.LOOKUP,
                f"the server's store {store!r} is not the one the submission went to "
                f"({submitted_to!r}): its 'not found' proves nothing; check by hand",
            )
        return Outcome(event=SubmissionNeverCreated())
    return Outcome(
        event=RequestFailed(
            request=RequestKind.LOOKUP,
            failure=FailureKind.MALFORMED_RESPONSE,
            detail="lookup result has no boolean 'found'",
        )
    )


def ms_to_s(value: Any) -> float | None:
    """A positive wire duration in milliseconds as seconds; None when absent or invalid."""
    if isinstance(value, int | float) and not isinstance(value, bool) and value > 0:
        return float(value) / 1000.0
    return None


def text_or_none(value: Any) -> str | None:
    return value if isinstance(value, str) else None


STATUS_BODY_KEYS = ("taskId", "status", "statusMessage", "createdAt")
"""What a task status body keeps as evidence; volatile keys (timestamps of the last
update, poll intervals) stay out so the digest is stable."""


def cancellation_observed(task: Mapping[str, Any], server_status_raw: str) -> Outcome:
    """A cancelled task status as ``CancellationObserved``, its body kept as evidence."""
    payload = canonical_json({k: v for k, v in task.items() if k in STATUS_BODY_KEYS})
    return Outcome(
        event=CancellationObserved(
            result_digest=digest_bytes(payload), server_status_raw=server_status_raw
        ),
        payload=payload,
    )


def progress_of(message: Mapping[str, Any]) -> tuple[float | None, str | None] | None:
    """``notifications/progress`` as (fraction in [0, 1] or None, message), else None (X11)."""
    if message.get("method") != "notifications/progress":
        return None
    params = message.get("params")
    params = params if isinstance(params, Mapping) else {}
    progress, total = params.get("progress"), params.get("total")
    fraction: float | None = None
    numbers = all(isinstance(v, int | float) and not isinstance(v, bool) for v in (progress, total))
    if numbers and total > 0:  # type: ignore[operator]
        fraction = max(0.0, min(1.0, float(progress) / float(total)))  # type: ignore[arg-type]
    text = params.get("message")
    return fraction, text if isinstance(text, str) else None


def last_progress(messages: tuple[dict[str, Any], ...]) -> float | None:
    """The last progress fraction among messages seen on a request's stream (X11)."""
    fractions = [p[0] for m in messages if (p := progress_of(m)) is not None and p[0] is not None]
    return fractions[-1] if fractions else None


def with_progress(outcome: Outcome, messages: tuple[dict[str, Any], ...]) -> Outcome:
    """``outcome`` carrying the last progress the call reported, if any (X11)."""
    fraction = last_progress(messages)
    if fraction is None:
        return outcome
    return Outcome(event=outcome.event, payload=outcome.payload, progress=fraction)


def progress_observer(sink: ProgressSink | None, call_node_id: str) -> Any:
    """An event observer for the I/O shell: each ``notifications/progress`` on a stream
    goes to ``sink`` as it arrives (X11). None when nobody listens."""
    if sink is None:
        return None

    def observe(event: SseEvent) -> None:
        try:
            message = json.loads(event.data)
        except ValueError:
            return
        if isinstance(message, Mapping):
            progress = progress_of(message)
            if progress is not None:
                sink(call_node_id, progress[0], progress[1])

    return observe
