"""What a model reads of a host call: early returns, status lines, questions, outcomes (G1).

Owns: turning a call's :class:`~longcall.client.CallResult` into the ``CallToolResult``
a host gets — the real result (paged) once accepted, or ``structuredContent = {handle,
state, progress, next: {tool, arguments}}`` with one short text line while it runs or
waits for input — and the texts of cancel and of a refused handle. A protocol error is
raised as :class:`ToolProtocolError` (a JSON-RPC error, never ``isError``). Must not:
read the ledger, drive a call or know how handles are made.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from longcall.adapters.aip151.mapping import PROTOCOL as AIP151
from longcall.adapters.apify.mapping import PROTOCOL as APIFY
from longcall.client import CallOutcome, CallResult
from longcall.core import State
from longcall.core.machine import EMPTY_RESULT_WARNING
from longcall.gateway.pages import ZERO_ITEMS_WARNING, page_count, page_of, zero_items
from longcall.runtime.inputs import InputQuestion
from longcall.runtime.step import CancelOutcome
from longcall.server.errors import ToolProtocolError
from longcall.server.wire import RELATED_TASK_META_KEY

STATUS_TOOL = "longcall_status"
RESULT_TOOL = "longcall_result"
CANCEL_TOOL = "longcall_cancel"
ANSWER_TOOL = "longcall_answer"
GATEWAY_TOOLS = (STATUS_TOOL, RESULT_TOOL, CANCEL_TOOL, ANSWER_TOOL)


def state_word(result: CallResult) -> str:
    """The one word a model reads for where a call stands."""
    outcome = result.outcome
    if outcome is CallOutcome.OK:
        return "completed"
    if outcome is CallOutcome.TOOL_ERROR:
        return "failed"
    if outcome is CallOutcome.PROTOCOL_ERROR:
        return "refused"
    if outcome is CallOutcome.CANCELLED:
        return "cancelled"
    if result.state is State.INPUT_REQUIRED and result.input is not None:
        return "input_required"
    if outcome is CallOutcome.NEEDS_PERSON:
        return "needs_operator"
    if result.state is State.CANCEL_REQUESTED:
        return "cancel_requested"
    return "running"


def _seconds(value: float) -> str:
    whole = int(value)
    return f"{whole} s" if whole < 120 else f"{whole // 60} min {whole % 60} s"


def status_reply(
    handle: str,
    result: CallResult,
    *,
    elapsed_s: float,
    fraction: float | None,
    wait_s: float,
) -> dict[str, Any]:
    """The answer for a call not accepted yet: its state, progress and the next step."""
    state = state_word(result)
    progress = {"fraction": fraction, "message": result.status_message}
    structured: dict[str, Any] = {"handle": handle, "state": state, "progress": progress}
    if state == "input_required" and result.input is not None:
        questions = [_question(q) for q in result.input.questions]
        structured["questions"] = questions
        arguments = {"handle": handle, "answers": _example_answers(result.input.questions)}
        structured["next"] = {"tool": ANSWER_TOOL, "arguments": arguments}
        asked = "; ".join(q["message"] or q["key"] for q in questions)
        text = (
            f"INPUT REQUIRED after {_seconds(elapsed_s)}: {asked}. Answer with {ANSWER_TOOL}"
            f" {json.dumps(arguments, ensure_ascii=False)} (the form is in questions)."
        )
    elif state == "needs_operator":
        structured["next"] = {"tool": STATUS_TOOL, "arguments": {"handle": handle, "wait_s": 0}}
        text = (
            f"NEEDS AN OPERATOR: the outcome of this call is uncertain ({result.reason});"
            f" an operator must settle it (longcall ops reconcile). Handle {handle}."
        )
    else:
        waiting: dict[str, Any] = {"handle": handle, "wait_s": wait_s}
        structured["next"] = {"tool": STATUS_TOOL, "arguments": waiting}
        detail = f", {result.status_message}" if result.status_message else ""
        if fraction is not None and not result.status_message:
            detail = f", {round(fraction * 100)}% done"
        word = "CANCEL REQUESTED" if state == "cancel_requested" else "RUNNING"
        text = (
            f"{word} for {_seconds(elapsed_s)}{detail}. Call {STATUS_TOOL} with"
            f" handle={handle} to wait for the result."
        )
    return {
        "content": [{"type": "text", "text": text}],
        "structuredContent": structured,
        "isError": False,
    }


def _question(question: InputQuestion) -> dict[str, Any]:
    return {
        "key": question.key,
        "message": question.message,
        "form": dict(question.schema) if question.schema is not None else None,
    }


def _example_answers(questions: Sequence[InputQuestion]) -> dict[str, Any]:
    """A ready-to-edit ``answers``: each form's fields with example values."""
    if len(questions) == 1:
        return {f.name: _example(f.type, f.choices) for f in questions[0].fields}
    return {q.key: {f.name: _example(f.type, f.choices) for f in q.fields} for q in questions}


def _example(kind: str | None, choices: tuple[Any, ...] | None) -> Any:
    if choices:
        return choices[0]
    return {"boolean": True, "integer": 1, "number": 1.0}.get(kind or "", "...")


def outcome_reply(handle: str, result: CallResult, *, page: int, page_chars: int) -> dict[str, Any]:
    """The answer for an accepted call: page ``page`` of its result, the cancellation,
    or (raised) the protocol error."""
    if result.outcome is CallOutcome.PROTOCOL_ERROR:
        raise protocol_error(handle, result)
    if result.outcome is CallOutcome.CANCELLED:
        text = cancelled_text(handle, result)
        return {"content": [{"type": "text", "text": text}], "isError": True}
    body = result_body(result)
    pages = page_count(body, page_chars)
    reply = page_of(body, page, page_chars)
    notes: list[str] = []
    empty = zero_items(body) or EMPTY_RESULT_WARNING in result.warnings
    if result.outcome is CallOutcome.OK and empty:
        notes.append(ZERO_ITEMS_WARNING)
    if pages > 1:
        structured: dict[str, Any] = {"handle": handle, "page": page, "pages": pages}
        if page < pages:
            arguments = {"handle": handle, "page": page + 1}
            structured["next"] = {"tool": RESULT_TOOL, "arguments": arguments}
            notes.append(
                f"Page {page} of {pages}. Call {RESULT_TOOL} with handle={handle},"
                f" page={page + 1} for the next page."
            )
        else:
            notes.append(f"Page {page} of {pages} (the last).")
        reply["structuredContent"] = structured
    if notes:
        reply["content"] = [*reply.get("content", []), *_texts(notes)]
    return reply


def _texts(lines: Sequence[str]) -> list[dict[str, Any]]:
    return [{"type": "text", "text": line} for line in lines]


NOT_TOOL_RESULTS = (APIFY, AIP151)
"""Protocols whose accepted result is their own value (an Apify-style run with its
dataset items, an AIP-151 ``response``), not an MCP ``CallToolResult``."""


def result_body(result: CallResult) -> dict[str, Any]:
    """An accepted result as the ``CallToolResult`` a host is given: an MCP upstream's
    as it sent it, another protocol's value as structured content and its JSON text."""
    if result.protocol not in NOT_TOOL_RESULTS and isinstance(result.result, Mapping):
        return _tool_result(result.result)
    return _as_result(result.result)


def _tool_result(upstream: Mapping[str, Any]) -> dict[str, Any]:
    """An upstream's ``CallToolResult`` as the gateway returns it: ``isError`` said
    (SDKs leave it out when false, and the server library takes a dict without it for
    a value to wrap), and without the related-task ``_meta`` naming the upstream's own
    task (a host's task is the gateway's, never the upstream's)."""
    body: dict[str, Any] = {"content": [], **upstream, "isError": bool(upstream.get("isError"))}
    meta = body.pop("_meta", None)
    if isinstance(meta, Mapping):
        kept = {key: value for key, value in meta.items() if key != RELATED_TASK_META_KEY}
        if kept:
            body["_meta"] = kept
    return body


def _as_result(value: Any) -> dict[str, Any]:
    """An accepted result that is not a ``CallToolResult`` (another protocol's value)."""
    if value is None:
        return {"content": [], "isError": False}
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
    result: dict[str, Any] = {"content": [{"type": "text", "text": text}], "isError": False}
    if isinstance(value, dict):
        result["structuredContent"] = value
    return result


def protocol_error(handle: str, result: CallResult) -> ToolProtocolError:
    """The upstream's JSON-RPC error, said as one: the call was refused, not failed."""
    error = result.result if isinstance(result.result, Mapping) else {}
    error = error.get("error", error) if isinstance(error.get("error"), Mapping) else error
    code = error.get("code")
    code = code if isinstance(code, int) and not isinstance(code, bool) else -32603
    message = str(error.get("message") or result.reason or "the upstream refused the call")
    text = (
        f"Protocol error {code} from the upstream: {message}. The upstream refused the call"
        " itself (this is not an error the tool reported); check the tool name and"
        " arguments."
    )
    data: dict[str, Any] = {"handle": handle, "upstreamError": dict(error)}
    return ToolProtocolError(code, text, data)


def cancelled_text(handle: str, result: CallResult) -> str:
    """Who ended the call, from the record: an operator's resolution, or the upstream."""
    who = result.record.resolved_by
    if who:
        return f"CANCELLED by an operator ({who}), not by the upstream (handle {handle})."
    return f"CANCELLED: the upstream confirmed the cancellation (handle {handle})."


def cancel_reply(handle: str, outcome: CancelOutcome, result: CallResult) -> dict[str, Any]:
    """What a cancel achieved, said plainly: requested (not yet confirmed) or confirmed."""
    state = state_word(result)
    said = outcome.outcome
    if said == "cancelled" or state == "cancelled":
        text = cancelled_text(handle, result)
    elif said == "already_terminal":
        text = f"Not cancelled: the call had already ended ({state}). Handle {handle}."
    elif said == "not_cancellable":
        text = f"Not cancelled: the upstream cannot cancel this call ({state}). Handle {handle}."
    else:
        text = (
            "CANCEL REQUESTED: sent to the upstream, not confirmed yet; the call may still"
            f" finish. Call {STATUS_TOOL} with handle={handle} to see which."
        )
    next_step = {"tool": STATUS_TOOL, "arguments": {"handle": handle, "wait_s": 0}}
    structured = {"handle": handle, "state": state, "cancel": said, "next": next_step}
    return {
        "content": [{"type": "text", "text": text}],
        "structuredContent": structured,
        "isError": False,
    }


def refused_text(reason: str, recent: Sequence[tuple[str, str]] | None) -> str:
    """A refused handle, with the handles this principal used lately (the way back);
    ``None`` when the principal is shared (anonymous over HTTP), so none are listed."""
    if recent is None:
        return f"{reason}. Handles are not listed to callers without a token."
    if recent:
        hint = "; ".join(f"{handle} ({tool})" for handle, tool in recent)
        return f"{reason}. Your recent handles: {hint}."
    return f"{reason}. You have no recent calls through this gateway."
