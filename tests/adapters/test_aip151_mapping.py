"""The AIP-151 mapping without a network: its exchanges driven by hand-written replies,
row by row of the tables in ``longcall.adapters.aip151.mapping`` (P3, X2, X5, X6, X7,
X9, C3, C4)."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest
from tests.refusals import not_accepted

from longcall.adapters.aip151 import Aip151Mapping, request_id_for
from longcall.adapters.exchange import (
    HttpReply,
    HttpRequest,
    Reply,
    TransportFailure,
    run_exchange,
)
from longcall.core import OperationRecord
from longcall.core import events as e
from longcall.core.keys import canonical_json, digest_bytes
from longcall.core.record import ResultKind, ServerStatus
from longcall.core.retry import FailureKind, RequestKind

URL = "http://api.invalid/v1"
NAME = "operations/op-1"
STRUCT = "type.googleapis.com/google.protobuf.Struct"
ERROR_INFO = "type.googleapis.com/google.rpc.ErrorInfo"
Serve = Callable[[HttpRequest], Reply]


def reply(body: Any, status: int = 200, **headers: str) -> HttpReply:
    raw = body if isinstance(body, bytes) else json.dumps(body).encode()
    return HttpReply(
        status=status, headers={"content-type": "application/json", **headers}, body=raw
    )


def always(answer: Reply, seen: list[HttpRequest] | None = None) -> Serve:
    def serve(request: HttpRequest) -> Reply:
        if seen is not None:
            seen.append(request)
        return answer

    return serve


def nothing(request: HttpRequest) -> Reply:
    raise AssertionError(f"no request expected, got {request.method} {request.path}")


def record(op: str | None = NAME, *, key: str = "lc1-key", tool: str = "report") -> OperationRecord:
    return OperationRecord(
        call_node_id="n",
        request_digest="d",
        tool_name=tool,
        tool_descriptor_digest="t",
        principal="p",
        server=URL,
        protocol="aip-151",
        adapter_version="1",
        submission_key=key,
        operation_id=op,
        cancel_generation=2,
        created_at=0.0,
        updated_at=0.0,
    )


def operation(*, done: bool = False, name: str = NAME, **fields: Any) -> dict[str, Any]:
    metadata = {"@type": STRUCT, "value": {"statusMessage": "step 1", "pollIntervalMs": 2500}}
    return {"name": name, "metadata": metadata, "done": done, **fields}


RESPONSE = {"@type": STRUCT, "value": {"rows": [1, 2]}}
TOOL_ERROR = {
    "code": 2,
    "message": "the tool failed",
    "details": [{"@type": ERROR_INFO, "reason": "TOOL_ERROR"}],
}
PROTOCOL_ERROR = {"code": 13, "message": "internal", "details": []}
CANCELLED = {"code": 1, "message": "cancelled"}


# --- start (X2) -----------------------------------------------------------------------------


def test_the_request_id_is_derived_from_the_submission_key_and_sent_with_the_arguments() -> None:
    """AIP-155: the same key gives the same UUID; the start carries it, no credential."""
    seen: list[HttpRequest] = []
    mapping = Aip151Mapping(URL)
    run_exchange(mapping.submit(record(None), {"a": 1}), always(reply(operation()), seen))
    (start,) = seen
    assert (start.method, start.path) == ("POST", "/v1/tools/report:start")
    assert json.loads(start.body or b"") == {
        "requestId": request_id_for("lc1-key"),
        "arguments": {"a": 1},
    }
    assert request_id_for("lc1-key") == request_id_for("lc1-key") != request_id_for("lc1-other")
    assert "authorization" not in start.headers


def test_an_acknowledged_start_carries_name_status_message_and_interval() -> None:
    outcome = run_exchange(Aip151Mapping(URL).submit(record(None), {}), always(reply(operation())))
    assert outcome.event == e.SubmitAcknowledged(
        operation_id=NAME,
        server_status_raw="done=false",
        status_message="step 1",
        poll_interval_s=2.5,
    )


@pytest.mark.parametrize("status", [400, 404])
def test_a_rejected_start_keeps_the_aip193_body_as_its_outcome(status: int) -> None:
    body = {"error": {"code": 3, "message": "bad arguments", "status": "INVALID_ARGUMENT"}}
    outcome = run_exchange(Aip151Mapping(URL).submit(record(None), {}), always(reply(body, status)))
    assert isinstance(outcome.event, e.SubmitRejected)
    assert outcome.payload == canonical_json(body)
    assert outcome.event.result_digest == digest_bytes(canonical_json(body))
    assert outcome.event.reason == f"HTTP {status}: bad arguments"


@pytest.mark.parametrize(
    ("status", "kind"),
    [
        (401, FailureKind.UNAUTHORIZED),
        (403, FailureKind.FORBIDDEN),
        (409, FailureKind.BAD_REQUEST),
        (429, FailureKind.RATE_LIMITED),
        (418, FailureKind.BAD_REQUEST),
        (501, FailureKind.BAD_REQUEST),
    ],
)
def test_a_start_refused_unprocessed_is_a_request_failure(status: int, kind: FailureKind) -> None:
    outcome = run_exchange(
        Aip151Mapping(URL).submit(record(None), {}),
        always(reply({"error": {"message": "no"}}, status, **{"retry-after": "7"})),
    )
    assert isinstance(outcome.event, e.RequestFailed)
    assert outcome.event.request is RequestKind.SUBMIT
    assert outcome.event.failure is kind
    assert outcome.event.retry_after_s == 7.0


@pytest.mark.parametrize(
    "answer",
    [
        reply({"error": {"message": "boom"}}, 500),
        reply({"error": {"message": "busy"}}, 503),
        reply({"error": {"message": "slow"}}, 408),
        reply(b'{"name": "operations/op-1", "done": fa'),
        reply({"name": "elsewhere/op-1"}),
        TransportFailure(kind=FailureKind.TIMEOUT, detail="read", processed_possible=True),
        TransportFailure(kind=FailureKind.TOO_LARGE, detail="big", processed_possible=True),
    ],
)
def test_a_start_that_may_have_created_the_operation_is_lost(answer: Reply) -> None:
    """X2: only the requestId can tell whether it exists now; never a blind resend."""
    outcome = run_exchange(Aip151Mapping(URL).submit(record(None), {}), always(answer))
    assert isinstance(outcome.event, e.SubmitOutcomeLost)


def test_a_refused_connection_is_a_request_failure_not_a_lost_start() -> None:
    refused = TransportFailure(
        kind=FailureKind.CONNECT_FAILED, detail="refused", processed_possible=False
    )
    outcome = run_exchange(Aip151Mapping(URL).submit(record(None), {}), always(refused))
    assert outcome.event == e.RequestFailed(
        request=RequestKind.SUBMIT, failure=FailureKind.CONNECT_FAILED, detail="refused"
    )


# --- lookup (X2) ----------------------------------------------------------------------------


def test_lookup_resends_the_same_start_while_the_arguments_are_held() -> None:
    mapping = Aip151Mapping(URL)
    seen: list[HttpRequest] = []
    lost = TransportFailure(kind=FailureKind.TIMEOUT, detail="read", processed_possible=True)
    run_exchange(mapping.submit(record(None), {"a": 1}), always(lost, seen))
    found = run_exchange(mapping.lookup(record(None)), always(reply(operation()), seen))
    assert seen[0].body == seen[1].body
    assert seen[0].path == seen[1].path
    assert found.event == e.SubmissionFound(
        operation_id=NAME, server_status_raw="done=false", poll_interval_s=2.5
    )


@pytest.mark.parametrize(
    ("listed", "expected"),
    [
        ([], e.SubmissionNeverCreated()),
        ([operation()], e.SubmissionFound(operation_id=NAME, server_status_raw="done=false")),
    ],
)
def test_lookup_after_a_restart_lists_by_request_id(listed: list[Any], expected: e.Event) -> None:
    """A fresh mapping (a restarted process) asks without creating anything."""
    seen: list[HttpRequest] = []
    outcome = run_exchange(
        Aip151Mapping(URL).lookup(record(None)), always(reply({"operations": listed}), seen)
    )
    (listing,) = seen
    assert (listing.method, listing.path) == ("GET", "/v1/operations")
    assert listing.query == {"filter": f'requestId="{request_id_for("lc1-key")}"'}
    assert outcome.event == expected


@pytest.mark.parametrize(
    "body",
    [
        {"operations": [operation(), operation(name="operations/op-2")]},
        {"operations": [{"name": "elsewhere/x"}]},
        {"operations": "nope"},
        b"not json",
    ],
)
def test_a_listing_we_cannot_trust_proves_nothing(body: Any) -> None:
    outcome = run_exchange(Aip151Mapping(URL).lookup(record(None)), always(reply(body)))
    assert isinstance(outcome.event, e.RequestFailed)
    assert outcome.event.request is RequestKind.LOOKUP
    assert outcome.event.failure is FailureKind.MALFORMED_RESPONSE


# --- poll (X3, X7, C3, C4) --------------------------------------------------------------------


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        (
            operation(),
            e.WorkingObserved(
                server_status_raw="done=false",
                status_message="step 1",
                poll_interval_s=2.5,
                progressed=True,
            ),
        ),
        (
            operation(done=True, response=RESPONSE),
            e.TerminalObserved(
                status=ServerStatus.COMPLETED,
                server_status_raw="done=true response",
                status_message="step 1",
            ),
        ),
        (
            operation(done=True, error=TOOL_ERROR),
            e.TerminalObserved(
                status=ServerStatus.FAILED,
                server_status_raw="done=true error.code=2",
                status_message="step 1",
            ),
        ),
        (
            operation(done=True, error=PROTOCOL_ERROR),
            e.TerminalObserved(
                status=ServerStatus.FAILED,
                server_status_raw="done=true error.code=13",
                status_message="step 1",
            ),
        ),
    ],
)
def test_poll_maps_each_operation_state(body: dict[str, Any], expected: e.Event) -> None:
    seen: list[HttpRequest] = []
    outcome = run_exchange(Aip151Mapping(URL).poll(record()), always(reply(body), seen))
    assert (seen[0].method, seen[0].path) == ("GET", "/v1/operations/op-1")
    assert outcome.event == expected


def test_poll_reads_the_cancelled_terminal_with_its_status_as_evidence() -> None:
    outcome = run_exchange(
        Aip151Mapping(URL).poll(record()), always(reply(operation(done=True, error=CANCELLED)))
    )
    assert outcome.event == e.CancellationObserved(
        result_digest=digest_bytes(canonical_json(CANCELLED)),
        server_status_raw="done=true error.code=1",
    )
    assert outcome.payload == canonical_json(CANCELLED)


@pytest.mark.parametrize(
    ("answer", "kind", "retry_after_s"),
    [
        (reply(operation(name="operations/other")), FailureKind.FOREIGN_IDENTITY, None),
        (reply({**operation(), "extra": 1}), FailureKind.MALFORMED_RESPONSE, None),
        (reply(b"<html>"), FailureKind.MALFORMED_RESPONSE, None),
        (reply({"error": {"message": "busy"}}, 503, **{"retry-after": "7"}),
         FailureKind.UNAVAILABLE, 7.0),
        (reply({"error": {"message": "slow down"}}, 429), FailureKind.RATE_LIMITED, None),
        (reply({"error": {"message": "boom"}}, 502), FailureKind.SERVER_ERROR, None),
        (TransportFailure(kind=FailureKind.TOO_LARGE, detail="big", processed_possible=True),
         FailureKind.TOO_LARGE, None),
    ],
)  # fmt: skip
def test_poll_failures_are_typed(
    answer: Reply, kind: FailureKind, retry_after_s: float | None
) -> None:
    outcome = run_exchange(Aip151Mapping(URL).poll(record()), always(answer))
    assert isinstance(outcome.event, e.RequestFailed)
    assert outcome.event.request is RequestKind.POLL
    assert outcome.event.failure is kind
    assert outcome.event.retry_after_s == retry_after_s


def test_poll_404_is_not_found_for_the_core_to_classify() -> None:
    answer = reply({"error": {"code": 5, "message": "not found"}}, 404)
    outcome = run_exchange(Aip151Mapping(URL).poll(record()), always(answer))
    assert outcome.event == e.OperationNotFound(detail="HTTP 404: not found")


def test_nothing_is_asked_about_an_operation_without_a_name() -> None:
    mapping = Aip151Mapping(URL)
    for exchange in (mapping.poll(record(None)), mapping.fetch_result(record(None)),
                     mapping.cancel(record(None))):  # fmt: skip
        outcome = run_exchange(exchange, nothing)
        assert isinstance(outcome.event, e.RequestFailed)
        assert outcome.event.failure is FailureKind.BAD_REQUEST


# --- result (X6, C3) -------------------------------------------------------------------------


TOOLS = {"tools": [{"name": "report", "outputSchema": {"type": "object", "required": ["rows"]}}]}


def _polled_then_fetched(done: dict[str, Any]) -> Any:
    """Bind, poll a done Operation, then fetch: the fetch sends nothing (the cache)."""
    mapping = Aip151Mapping(URL)
    run_exchange(mapping.bind("report"), always(reply(TOOLS)))
    run_exchange(mapping.poll(record()), always(reply(done)))
    return run_exchange(mapping.fetch_result(record()), nothing)


def test_a_completed_operation_is_fetched_from_the_poll_it_was_seen_in() -> None:
    outcome = _polled_then_fetched(operation(done=True, response=RESPONSE))
    assert outcome.event == e.ResultFetched(
        status=ServerStatus.COMPLETED,
        result_kind=ResultKind.VALUE,
        result_digest=digest_bytes(canonical_json(RESPONSE)),
        operation_id=NAME,
    )
    assert outcome.payload == canonical_json(RESPONSE)


@pytest.mark.parametrize(
    ("error", "kind"),
    [(TOOL_ERROR, ResultKind.TOOL_ERROR), (PROTOCOL_ERROR, ResultKind.PROTOCOL_ERROR)],
)
def test_a_failed_operation_keeps_its_status_and_kind(
    error: dict[str, Any], kind: ResultKind
) -> None:
    outcome = _polled_then_fetched(operation(done=True, error=error))
    assert outcome.event == e.ResultFetched(
        status=ServerStatus.FAILED,
        result_kind=kind,
        result_digest=digest_bytes(canonical_json(error)),
        operation_id=NAME,
    )


def test_a_response_breaking_the_output_schema_is_never_accepted() -> None:
    outcome = _polled_then_fetched(
        operation(done=True, response={"@type": STRUCT, "value": {"other": 1}})
    )
    assert isinstance(outcome.event, e.ResultFetchFailed)
    assert outcome.event.retryable is False
    assert "output schema" in outcome.event.reason


def test_an_empty_response_is_flagged_empty() -> None:
    outcome = _polled_then_fetched(
        operation(done=True, response={"@type": STRUCT, "value": {"rows": []}})
    )
    assert isinstance(outcome.event, e.ResultFetched)
    assert outcome.event.empty is True


def test_the_re_fetch_re_reads_the_operation_and_rebinds_for_the_schema() -> None:
    """A restarted process: no cache, no binding; the fetch re-reads and re-binds."""
    seen: list[HttpRequest] = []
    answers = {
        "/v1/operations/op-1": reply(operation(done=True, response={"@type": STRUCT, "value": {}})),
        "/v1/tools": reply(TOOLS),
    }

    def serve(request: HttpRequest) -> Reply:
        seen.append(request)
        return answers[request.path]

    outcome = run_exchange(Aip151Mapping(URL).fetch_result(record()), serve)
    assert [r.path for r in seen] == ["/v1/operations/op-1", "/v1/tools"]
    assert isinstance(outcome.event, e.ResultFetchFailed)  # {} lacks the required rows
    assert outcome.event.retryable is False


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        (operation(done=True, name="operations/other", response=RESPONSE),
         FailureKind.FOREIGN_IDENTITY),
        (operation(done=True, response={"value": {}}), None),
        (operation(), None),
        (operation(done=True, error=CANCELLED), None),
    ],
)  # fmt: skip
def test_a_re_fetch_that_cannot_be_ours_or_is_no_result_is_never_accepted(
    body: dict[str, Any], expected: FailureKind | None
) -> None:
    """C3 on the re-fetch path; a body breaking the proto, or one no longer done or now
    cancelled, is a non-retryable fetch failure (the core escalates with the reason)."""
    outcome = run_exchange(
        Aip151Mapping(URL).fetch_result(record()),
        lambda request: reply(body) if request.path != "/v1/tools" else reply(TOOLS),
    )
    not_accepted(outcome, expected)


# --- cancel and input (X5, X4) --------------------------------------------------------------


def test_cancel_is_a_request_only() -> None:
    seen: list[HttpRequest] = []
    outcome = run_exchange(Aip151Mapping(URL).cancel(record()), always(reply({}), seen))
    assert (seen[0].method, seen[0].path) == ("POST", "/v1/operations/op-1:cancel")
    assert outcome.event == e.CancelAcknowledged(cancel_generation=2)


def test_cancel_failures() -> None:
    mapping = Aip151Mapping(URL)
    gone = run_exchange(mapping.cancel(record()), always(reply({"error": {}}, 404)))
    limited = run_exchange(mapping.cancel(record()), always(reply({}, 429)))
    assert isinstance(gone.event, e.OperationNotFound)
    assert isinstance(limited.event, e.RequestFailed)
    assert limited.event.failure is FailureKind.RATE_LIMITED


def test_operations_take_no_input() -> None:
    outcome = run_exchange(Aip151Mapping(URL).send_input(record(), {"k": 1}), nothing)
    assert outcome is not None
    assert isinstance(outcome.event, e.RequestFailed)
    assert outcome.event.failure is FailureKind.BAD_REQUEST


def test_the_arguments_are_held_only_while_the_start_is_unsettled() -> None:
    """A worker runs for days: an acknowledged, rejected or found start lets go of its
    arguments; a lost one keeps them for the lookup's resend."""
    mapping = Aip151Mapping(URL)
    lost = TransportFailure(kind=FailureKind.TIMEOUT, detail="read", processed_possible=True)
    run_exchange(mapping.submit(record(None, key="acked"), {"a": 1}), always(reply(operation())))
    run_exchange(mapping.submit(record(None, key="refused"), {}), always(reply({}, 400)))
    run_exchange(mapping.submit(record(None, key="garbled"), {}), always(reply(b"{")))
    run_exchange(mapping.submit(record(None, key="lost"), {}), always(lost))
    run_exchange(mapping.submit(record(None, key="found"), {}), always(lost))
    run_exchange(mapping.lookup(record(None, key="found")), always(reply(operation())))
    seen: list[HttpRequest] = []
    for key in ("acked", "refused", "garbled", "lost", "found"):
        run_exchange(mapping.lookup(record(None, key=key)), always(reply(operation()), seen))
    assert [r.method for r in seen] == ["GET", "GET", "POST", "POST", "GET"]
