"""Operations in every local state on a real ledger, made through the real machine.

Owns: :func:`fill`, which writes one operation per :data:`KINDS` entry (every local
state, each terminal outcome, a retried request, two reconciliations: one that never
got an id and one that did) by running core events through ``apply_event`` exactly as
a driver would, and :func:`fill_many` for volume (the console's list benchmark).
Status messages can be made hostile (HTML a browser would run) to test that pages
show them as text. Must not: write rows by hand (every row is a real transition), or
talk to a network.
"""

from __future__ import annotations

import json
from collections.abc import Iterator

from longcall.core import OperationRecord, ResultKind, ServerStatus, new_operation
from longcall.core.events import (
    CancelAcknowledged,
    CancellationObserved,
    CancelRequested,
    Event,
    InputRequestObserved,
    ReconciliationEscalated,
    RequestFailed,
    ResultFetched,
    ResultFetchStarted,
    SubmissionNeverCreated,
    SubmitAcknowledged,
    SubmitOutcomeLost,
    TerminalObserved,
    WorkingObserved,
)
from longcall.core.keys import canonical_json, digest_bytes, request_digest
from longcall.core.retry import FailureKind, RequestKind
from longcall.ledger import WORKER, Ledger
from longcall.runtime.inputs import FORM_METHOD, store_requests
from longcall.runtime.step import apply_event

HOSTILE = '<script>window.__pwned = 1</script><img src=x onerror="window.__pwned = 2">'
"""A status message a browser would run if a page put it in as HTML."""
INPUT_KEY = "approval-1"
APPROVAL_FORM = {
    "type": "object",
    "properties": {"approved": {"type": "boolean", "description": "Apply the change?"}},
    "required": ["approved"],
}
KINDS = (
    "submitting",
    "submission_unknown",
    "not_found_safe",
    "working",
    "retrying",
    "input_required",
    "cancel_requested",
    "terminal_observed",
    "fetching_result",
    "accepted_ok",
    "accepted_empty",
    "tool_error",
    "protocol_error",
    "cancelled",
    "reconcile_unsent",
    "reconcile_lost",
)
"""One operation of each: its call node is ``{prefix}{kind}``."""


class _Steps:
    """One operation moved event by event through the machine, on virtual time."""

    def __init__(self, ledger: Ledger, record: OperationRecord, now: float) -> None:
        self.ledger = ledger
        self.record = record
        self.now = now

    def __call__(self, event: Event, payload: bytes | None = None) -> _Steps:
        self.now += 1.5
        self.record = apply_event(
            self.ledger, self.record, event, now=self.now, jitter=0.5, result_payload=payload
        ).record
        return self


def _start(
    ledger: Ledger, node: str, tool: str, *, now: float, server: str, owner: str | None = None
) -> _Steps:
    arguments = {"node": node}
    record = new_operation(
        call_node_id=node,
        request_digest=request_digest(tool, arguments),
        tool_name=tool,
        tool_descriptor_digest=digest_bytes(tool.encode()),
        principal="sample",
        server=server,
        protocol="2026-07-28",
        adapter_version="1",
        now=now,
        submission_lookup=True,
        tool_idempotent=tool != "deploy",
    ).record
    return _Steps(ledger, ledger.create(record, owner=owner), now)


def _acked(steps: _Steps, message: str) -> _Steps:
    steps(
        SubmitAcknowledged(
            operation_id=f"task-{steps.record.call_node_id}",
            status_message=message,
            poll_interval_s=2.0,
            ttl_s=86_400.0,
        )
    )
    for n in range(3):  # repeated polls: the timeline folds them into one row
        steps(WorkingObserved(status_message=message or f"step {n + 1}/10", progressed=True))
    return steps


def _fetched(steps: _Steps, kind: ResultKind, result: object, *, empty: bool = False) -> None:
    status = ServerStatus.COMPLETED if kind is ResultKind.VALUE else ServerStatus.FAILED
    steps(TerminalObserved(status=status))
    steps(ResultFetchStarted())
    payload = canonical_json(result)
    steps(
        ResultFetched(
            status=status, result_kind=kind, result_digest=digest_bytes(payload), empty=empty
        ),
        payload,
    )


def _make(steps: _Steps, kind: str, message: str) -> None:
    """Drive one operation to the place ``kind`` names."""
    lost = SubmitOutcomeLost(reason="the create response was lost")
    match kind:
        case "submitting":
            pass
        case "submission_unknown":
            steps(lost)
        case "not_found_safe":
            steps(lost)(SubmissionNeverCreated())
        case "reconcile_unsent":
            steps(lost)(ReconciliationEscalated(reason=f"no lookup could settle it: {message}"))
        case _:
            _acked(steps, message)
            _after_ack(steps, kind, message)


def _after_ack(steps: _Steps, kind: str, message: str) -> None:
    node = steps.record.call_node_id
    match kind:
        case "retrying":
            steps(
                RequestFailed(
                    request=RequestKind.POLL,
                    failure=FailureKind.UNAVAILABLE,
                    detail=f"503 from the server: {message}",
                )
            )
        case "input_required":
            request = {
                "method": FORM_METHOD,
                "params": {
                    "mode": "form",
                    "message": f"Approve this change? {message}",
                    "requestedSchema": APPROVAL_FORM,
                },
            }
            store_requests(steps.ledger, node, json.dumps({INPUT_KEY: request}).encode())
            steps(
                InputRequestObserved(
                    keys=(INPUT_KEY,),
                    status_message=message,
                    deadline_at=steps.now + 3_600.0,
                )
            )
        case "cancel_requested":
            steps(CancelRequested(requested_by="operator"))
        case "terminal_observed":
            steps(TerminalObserved(status=ServerStatus.COMPLETED, status_message=message))
        case "fetching_result":
            steps(TerminalObserved(status=ServerStatus.COMPLETED))(ResultFetchStarted())
        case "accepted_ok":
            rows = {"content": [{"type": "text", "text": message}], "rows": list(range(300))}
            _fetched(steps, ResultKind.VALUE, rows)
        case "accepted_empty":
            _fetched(steps, ResultKind.VALUE, {"content": [], "items": []}, empty=True)
        case "tool_error":
            text = {"content": [{"type": "text", "text": message}], "isError": True}
            _fetched(steps, ResultKind.TOOL_ERROR, text)
        case "protocol_error":
            _fetched(steps, ResultKind.PROTOCOL_ERROR, {"code": -32603, "message": message})
        case "cancelled":
            steps(CancelRequested(requested_by="operator"))
            steps(CancelAcknowledged(cancel_generation=steps.record.cancel_generation))
            evidence = canonical_json({"taskId": f"task-{node}", "status": "cancelled"})
            steps(CancellationObserved(result_digest=digest_bytes(evidence)), evidence)
        case "reconcile_lost":
            steps(ReconciliationEscalated(reason=f"the task vanished: {message}"))
        case "working":
            pass
        case _:
            raise ValueError(f"no sample kind {kind!r}")


def fill(
    ledger: Ledger,
    *,
    now: float,
    prefix: str = "",
    hostile: bool = False,
    server: str = "http://127.0.0.1:9/mcp",
    worker: str | None = None,
) -> dict[str, str]:
    """One operation of every :data:`KINDS` entry; returns kind → call node id. With
    ``hostile``, every status message and error text is :data:`HOSTILE`. With
    ``worker``, a worker of that name holds a lease (a day from ``now``) on the
    operations it would drive: all but ``submitting``, which nobody holds."""
    nodes: dict[str, str] = {}
    if worker is not None:
        ledger.register_worker(worker, kind=WORKER, now=now, lease_s=86_400.0)
    for i, kind in enumerate(KINDS):
        node = f"{prefix}{kind}"
        tool = (
            "deploy" if kind == "reconcile_unsent" else ("approve" if "input" in kind else "crawl")
        )
        owner = None if kind == "submitting" else worker
        steps = _start(ledger, node, tool, now=now + i * 10.0, server=server, owner=owner)
        _make(steps, kind, HOSTILE if hostile else f"{kind.replace('_', ' ')} at the server")
        nodes[kind] = node
    return nodes


def fill_many(ledger: Ledger, count: int, *, now: float) -> Iterator[int]:
    """``count`` operations cycling through :data:`KINDS` (yields how many so far every
    thousand, for a progress line)."""
    for i in range(count):
        kind = KINDS[i % len(KINDS)]
        steps = _start(
            ledger,
            f"bulk-{i:06d}-{kind}",
            ("crawl", "sleep_report", "approve")[i % 3],
            now=now + i * 0.01,
            server=f"http://127.0.0.1:{9000 + i % 4}/mcp",
        )
        _make(steps, kind, f"step {i % 10}/10")
        if (i + 1) % 1000 == 0:
            yield i + 1
