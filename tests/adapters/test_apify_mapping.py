"""The Apify-style mapping without a network: its exchanges driven by hand-written
JSON-RPC replies, row by row of the tables in ``longcall.adapters.apify.mapping``
(P4, X2, X3, X5, X6, X7, X9, C3, C4)."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest
from tests.refusals import not_accepted

from longcall.adapters.apify import ApifyMapping, stable_run
from longcall.adapters.exchange import (
    HttpReply,
    HttpRequest,
    Reply,
    TransportFailure,
    run_exchange,
)
from longcall.adapters.sse import encode_event
from longcall.core import OperationRecord
from longcall.core import events as e
from longcall.core.keys import canonical_json, digest_bytes
from longcall.core.record import ResultKind, ServerStatus
from longcall.core.retry import FailureKind, RequestKind

URL = "http://apify.invalid/apify/mcp"
RUN = "run-1"
NOW = 1_000_000.0
Answer = Callable[[str, dict[str, Any]], Any]
"""(tool or method, arguments) → a result dict, an ``("error", code)`` pair or a Reply."""


class Clock:
    def __init__(self) -> None:
        self.now = NOW

    def __call__(self) -> float:
        return self.now


def serve(
    answer: Answer, seen: list[dict[str, Any]] | None = None
) -> Callable[[HttpRequest], Reply]:
    """A JSON-RPC server: answers each call with OUR request id, unless told otherwise."""

    def handle(request: HttpRequest) -> Reply:
        body = request.json_body
        assert isinstance(body, dict)
        if seen is not None:
            seen.append({**body, "timeout_s": request.timeout_s})
        params = body.get("params") or {}
        if body["method"] == "tools/call":
            got = answer(params["name"], params.get("arguments") or {})
        else:
            got = answer(body["method"], params)
        if isinstance(got, HttpReply | TransportFailure):
            return got
        if isinstance(got, tuple):
            message: dict[str, Any] = {"jsonrpc": "2.0", "id": body["id"],
                                       "error": {"code": got[1], "message": "no"}}  # fmt: skip
        else:
            message = {"jsonrpc": "2.0", "id": body["id"], "result": got}
        return HttpReply(
            status=200,
            headers={"content-type": "application/json"},
            body=json.dumps(message).encode(),
        )

    return handle


def record(op: str | None = RUN, *, deadline_at: float | None = None) -> OperationRecord:
    return OperationRecord(
        call_node_id="n",
        request_digest="d",
        tool_name="longcall--report",
        tool_descriptor_digest="t",
        principal="p",
        server=URL,
        protocol="apify",
        adapter_version="1",
        submission_key="lc1-key",
        operation_id=op,
        cancel_generation=3,
        deadline_at=deadline_at,
        created_at=0.0,
        updated_at=0.0,
    )


def run(status: str, *, run_id: str = RUN, items: int | None = 0) -> dict[str, Any]:
    dataset: dict[str, Any] = {"id": f"dataset-{run_id}"}
    if items is not None:
        dataset["itemCount"] = items
    return {
        "runId": run_id,
        "status": status,
        "summary": f"{status} now",
        "nextStep": "poll",
        "storages": {"datasets": {"default": dataset}},
    }


def run_result(view: dict[str, Any], **extra: Any) -> dict[str, Any]:
    return {
        "content": [{"type": "text", "text": json.dumps(view)}],
        "structuredContent": view,
        "isError": False,
        **extra,
    }


def not_found(_name: str, _args: dict[str, Any]) -> dict[str, Any]:
    return {
        "content": [{"type": "text", "text": "Run with ID 'run-1' not found."}],
        "isError": True,
    }


def id_null(status: int) -> HttpReply:
    """An error about no request of ours (the server could not read it)."""
    body = {"jsonrpc": "2.0", "id": None, "error": {"code": -32602, "message": "Not Acceptable"}}
    return HttpReply(
        status=status, headers={"content-type": "application/json"}, body=json.dumps(body).encode()
    )


def mapping(**options: Any) -> ApifyMapping:
    return ApifyMapping(URL, clock=Clock(), **options)


# --- initialize and start (X2, X3) ----------------------------------------------------------


def test_initialize_learns_the_submission_key_capability() -> None:
    seen: list[dict[str, Any]] = []
    answers = {
        "initialize": {"protocolVersion": "2025-11-25",
                       "capabilities": {"experimental": {"dev.longcall/submissionKey": {}}}},
    }  # fmt: skip
    subject = mapping()

    def answer(method: str, params: dict[str, Any]) -> Any:
        if method == "notifications/initialized":
            return HttpReply(status=202)
        return answers[method]

    run_exchange(subject.connect(), serve(answer, seen))
    assert [m["method"] for m in seen] == ["initialize", "notifications/initialized"]
    assert seen[0]["params"]["capabilities"] == {}
    assert subject.submission_keys is True


def test_the_start_waits_within_the_cap_and_the_deadline_and_maps_the_run_id() -> None:
    """waitSecs = min(start wait, 45, deadline − now); the runId is the operation id."""
    seen: list[dict[str, Any]] = []
    subject = mapping(start_wait_secs=30, submission_keys=True)
    outcome = run_exchange(
        subject.submit(record(None, deadline_at=NOW + 12.5), {"rows": 1}),
        serve(lambda _n, _a: run_result(run("RUNNING")), seen),
    )
    (start,) = seen
    assert start["params"]["arguments"] == {"rows": 1, "waitSecs": 12}
    assert start["params"]["_meta"] == {"dev.longcall/submissionKey": "lc1-key"}
    assert start["timeout_s"] == 12 + 15.0
    assert outcome.event == e.SubmitAcknowledged(
        operation_id=RUN,
        server_status_raw="RUNNING",
        status_message="RUNNING now",
        poll_interval_s=0.1,
    )


def test_a_past_deadline_waits_zero_seconds() -> None:
    seen: list[dict[str, Any]] = []
    run_exchange(
        mapping().submit(record(None, deadline_at=NOW - 5), {}),
        serve(lambda _n, _a: run_result(run("READY")), seen),
    )
    assert seen[0]["params"]["arguments"]["waitSecs"] == 0
    assert "_meta" not in seen[0]["params"]  # the server offered no submission keys


@pytest.mark.parametrize("code", [-32602, -32601, -32600])
def test_a_start_refused_by_our_call_is_rejected_with_the_error_as_outcome(code: int) -> None:
    outcome = run_exchange(
        mapping().submit(record(None), {}), serve(lambda _n, _a: ("error", code))
    )
    assert isinstance(outcome.event, e.SubmitRejected)
    assert outcome.payload == canonical_json({"code": code, "message": "no"})


def test_a_tool_refusing_to_start_is_rejected() -> None:
    refusal = {"content": [{"type": "text", "text": "Actor not found"}], "isError": True}
    outcome = run_exchange(mapping().submit(record(None), {}), serve(lambda _n, _a: refusal))
    assert isinstance(outcome.event, e.SubmitRejected)
    assert outcome.event.reason == "Actor not found"


@pytest.mark.parametrize(
    "answer",
    [
        ("error", -32603),
        ("error", -32001),
        {"content": [{"type": "text", "text": "started"}], "isError": False},
        TransportFailure(kind=FailureKind.TIMEOUT, detail="read", processed_possible=True),
        HttpReply(status=502, body=b"bad gateway"),
    ],
)
def test_a_start_that_may_have_started_a_run_is_lost(answer: Any) -> None:
    outcome = run_exchange(mapping().submit(record(None), {}), serve(lambda _n, _a: answer))
    assert isinstance(outcome.event, e.SubmitOutcomeLost)


@pytest.mark.parametrize("status", [400, 406])
def test_an_error_with_a_null_id_on_the_start_is_never_an_outcome(status: int) -> None:
    """C3: the server could not read our request: nothing was started, and the error is
    not the call's outcome (never a SubmitRejected receipt)."""
    outcome = run_exchange(
        mapping().submit(record(None), {}), serve(lambda _n, _a: id_null(status))
    )
    assert isinstance(outcome.event, e.RequestFailed)
    assert outcome.event.request is RequestKind.SUBMIT
    assert outcome.event.failure is FailureKind.BAD_REQUEST
    assert outcome.payload is None


def test_an_answer_to_another_request_is_not_ours() -> None:
    def other_id(request: HttpRequest) -> Reply:
        body = {"jsonrpc": "2.0", "id": 999, "result": run_result(run("RUNNING"))}
        return HttpReply(status=200, headers={"content-type": "application/json"},
                         body=json.dumps(body).encode())  # fmt: skip

    outcome = run_exchange(mapping().submit(record(None), {}), other_id)
    assert isinstance(outcome.event, e.SubmitOutcomeLost)


def test_the_answer_may_come_as_an_event_stream_after_a_priming_event() -> None:
    def streamed(request: HttpRequest) -> Reply:
        assert isinstance(request.json_body, dict)
        message = {"jsonrpc": "2.0", "id": request.json_body["id"],
                   "result": run_result(run("RUNNING"))}  # fmt: skip
        return HttpReply(
            status=200,
            headers={"content-type": "text/event-stream"},
            body=encode_event("", id="prime") + encode_event(json.dumps(message)),
        )

    outcome = run_exchange(mapping().submit(record(None), {}), streamed)
    assert isinstance(outcome.event, e.SubmitAcknowledged)


def test_there_is_no_lookup_by_key_and_no_input() -> None:
    subject = mapping()
    for exchange in (subject.lookup(record()), subject.send_input(record(), {"k": 1})):
        outcome = run_exchange(exchange, serve(lambda _n, _a: pytest.fail("nothing is sent")))
        assert outcome is not None
        assert isinstance(outcome.event, e.RequestFailed)
        assert outcome.event.failure is FailureKind.BAD_REQUEST


# --- poll (X3, X7, C3) -----------------------------------------------------------------------


@pytest.mark.parametrize("status", ["READY", "RUNNING", "TIMING-OUT", "ABORTING"])
def test_working_statuses(status: str) -> None:
    outcome = run_exchange(mapping().poll(record()), serve(lambda _n, _a: run_result(run(status))))
    assert outcome.event == e.WorkingObserved(
        server_status_raw=status,
        status_message=f"{status} now",
        poll_interval_s=0.1,
        progressed=True,
    )


@pytest.mark.parametrize(
    ("status", "terminal"),
    [("SUCCEEDED", ServerStatus.COMPLETED), ("FAILED", ServerStatus.FAILED),
     ("TIMED-OUT", ServerStatus.FAILED)],
)  # fmt: skip
def test_terminal_statuses(status: str, terminal: ServerStatus) -> None:
    outcome = run_exchange(mapping().poll(record()), serve(lambda _n, _a: run_result(run(status))))
    assert outcome.event == e.TerminalObserved(
        status=terminal, server_status_raw=status, status_message=f"{status} now"
    )


def test_aborted_is_the_cancelled_terminal_with_the_run_as_evidence() -> None:
    view = run("ABORTED")
    outcome = run_exchange(mapping().poll(record()), serve(lambda _n, _a: run_result(view)))
    payload = canonical_json(stable_run(view))
    assert outcome.event == e.CancellationObserved(
        result_digest=digest_bytes(payload), server_status_raw="ABORTED"
    )
    assert outcome.payload == payload


def test_the_poll_waits_within_the_cap_and_the_deadline() -> None:
    seen: list[dict[str, Any]] = []
    clock = Clock()
    subject = ApifyMapping(URL, clock=clock, wait_secs=45)
    reply = serve(lambda _n, _a: run_result(run("RUNNING")), seen)
    run_exchange(subject.poll(record()), reply)
    run_exchange(subject.poll(record(deadline_at=NOW + 100)), reply)
    clock.now = NOW + 90  # the injected clock moves; the next wait shrinks with it
    run_exchange(subject.poll(record(deadline_at=NOW + 100)), reply)
    assert [m["params"]["arguments"]["waitSecs"] for m in seen] == [45, 45, 10]
    assert [m["timeout_s"] for m in seen] == [60.0, 60.0, 25.0]
    assert seen[0]["params"]["name"] == "get-actor-run"


@pytest.mark.parametrize(
    ("answer", "kind"),
    [
        (run_result(run("RUNNING", run_id="run-2")), FailureKind.FOREIGN_IDENTITY),
        (run_result(run("DANCING")), FailureKind.MALFORMED_RESPONSE),
        ({"content": [{"type": "text", "text": "no run"}], "isError": False},
         FailureKind.MALFORMED_RESPONSE),
        ({"content": [{"type": "text", "text": "upstream broke"}], "isError": True},
         FailureKind.SERVER_ERROR),
        (("error", -32602), FailureKind.VALIDATION),
        (("error", -32603), FailureKind.SERVER_ERROR),
        (("error", -1), FailureKind.BAD_REQUEST),
        (id_null(406), FailureKind.BAD_REQUEST),
        (HttpReply(status=429, headers={"retry-after": "3"}), FailureKind.RATE_LIMITED),
        (TransportFailure(kind=FailureKind.TOO_LARGE, detail="big", processed_possible=True),
         FailureKind.TOO_LARGE),
    ],
)  # fmt: skip
def test_poll_failures_are_typed(answer: Any, kind: FailureKind) -> None:
    outcome = run_exchange(mapping().poll(record()), serve(lambda _n, _a: answer))
    assert isinstance(outcome.event, e.RequestFailed)
    assert outcome.event.request is RequestKind.POLL
    assert outcome.event.failure is kind


def test_a_run_not_found_is_x7s() -> None:
    outcome = run_exchange(mapping().poll(record()), serve(not_found))
    assert outcome.event == e.OperationNotFound(detail="Run with ID 'run-1' not found.")


# --- result (X6, C3) -------------------------------------------------------------------------


def dataset(total: int, *, lose_at: int | None = None, lie: bool = False) -> Answer:
    """Pages of the run's dataset; ``lose_at`` drops the last item of the page at that
    offset while still counting it; ``lie`` reports another total."""
    items = [{"i": i} for i in range(total)]

    def answer(name: str, args: dict[str, Any]) -> Any:
        assert name == "get-dataset-items"
        offset, limit = args["offset"], args["limit"]
        page = items[offset : offset + limit]
        count = len(page)
        if lose_at == offset:
            page = page[:-1]
        return {
            "content": [],
            "structuredContent": {"items": page, "offset": offset, "itemCount": count,
                                  "totalItemCount": total + 1 if lie else total},
        }  # fmt: skip

    return answer


def _fetched_after_poll(view: dict[str, Any], pages: Answer, **options: Any) -> Any:
    subject = mapping(**options)
    usage = {"com.apify/ActorRun": {"usageTotalUsd": 0.5}}
    run_exchange(subject.poll(record()), serve(lambda _n, _a: run_result(view, _meta=usage)))
    seen: list[dict[str, Any]] = []
    return run_exchange(subject.fetch_result(record()), serve(pages, seen)), seen


def test_a_succeeded_run_is_read_page_by_page() -> None:
    view = run("SUCCEEDED", items=5)
    outcome, seen = _fetched_after_poll(view, dataset(5), page_limit=2)
    assert [m["params"]["arguments"]["offset"] for m in seen] == [0, 2, 4]
    payload = canonical_json(
        {"run": stable_run(view), "items": [{"i": i} for i in range(5)],
         "usage": {"usageTotalUsd": 0.5}}
    )  # fmt: skip
    assert outcome.event == e.ResultFetched(
        status=ServerStatus.COMPLETED,
        result_kind=ResultKind.VALUE,
        result_digest=digest_bytes(payload),
        operation_id=RUN,
    )
    assert outcome.payload == payload


def test_zero_items_is_empty_and_a_failed_run_is_a_tool_error() -> None:
    empty, _ = _fetched_after_poll(run("SUCCEEDED", items=0), dataset(0))
    failed, _ = _fetched_after_poll(run("FAILED", items=1), dataset(1))
    assert isinstance(empty.event, e.ResultFetched)
    assert empty.event.empty is True
    assert isinstance(failed.event, e.ResultFetched)
    assert (failed.event.status, failed.event.result_kind) == (
        ServerStatus.FAILED,
        ResultKind.TOOL_ERROR,
    )
    assert failed.event.empty is False


@pytest.mark.parametrize(
    ("pages", "reason"),
    [
        (dataset(5, lose_at=2), "itemCount=2"),
        (dataset(5, lie=True), "totalItemCount=6"),
        (lambda _n, a: {"content": [], "structuredContent": {"items": [], "offset": a["offset"],
                                                            "itemCount": 0, "totalItemCount": 5}},
         "read 0 items"),
        (lambda _n, _a: {"content": [], "structuredContent": {"rows": []}}, "no items list"),
    ],
)  # fmt: skip
def test_a_page_contradicting_the_run_is_never_accepted(pages: Answer, reason: str) -> None:
    outcome, _ = _fetched_after_poll(run("SUCCEEDED", items=5), pages, page_limit=2)
    assert isinstance(outcome.event, e.ResultFetchFailed)
    assert outcome.event.retryable is False
    assert reason in outcome.event.reason
    assert outcome.payload is None


def test_a_lost_page_is_a_fetch_request_failure() -> None:
    lost = TransportFailure(kind=FailureKind.TRANSPORT, detail="reset", processed_possible=True)
    outcome, _ = _fetched_after_poll(run("SUCCEEDED", items=5), lambda _n, _a: lost)
    assert outcome.event == e.RequestFailed(
        request=RequestKind.FETCH, failure=FailureKind.TRANSPORT, detail="reset"
    )


def test_the_re_fetch_re_reads_the_run_without_waiting() -> None:
    """A restarted process: the run is read again (waitSecs 0), then its pages."""
    seen: list[dict[str, Any]] = []
    pages = dataset(1)

    def answer(name: str, args: dict[str, Any]) -> Any:
        if name == "get-actor-run":
            return run_result(run("SUCCEEDED", items=1))
        return pages(name, args)

    outcome = run_exchange(mapping().fetch_result(record()), serve(answer, seen))
    assert [m["params"]["name"] for m in seen] == ["get-actor-run", "get-dataset-items"]
    assert seen[0]["params"]["arguments"] == {"runId": RUN, "waitSecs": 0}
    assert isinstance(outcome.event, e.ResultFetched)


@pytest.mark.parametrize(
    ("view", "expected"),
    [
        (run("SUCCEEDED", run_id="run-2", items=0), FailureKind.FOREIGN_IDENTITY),
        (run("RUNNING"), None),
    ],
)
def test_a_re_fetch_that_cannot_be_ours_or_is_no_result_is_never_accepted(
    view: dict[str, Any], expected: FailureKind | None
) -> None:
    """C3 on the re-fetch path: a run naming another runId is never read as ours."""
    outcome = run_exchange(mapping().fetch_result(record()), serve(lambda _n, _a: run_result(view)))
    not_accepted(outcome, expected)


def test_a_run_without_an_item_count_is_retried() -> None:
    outcome, _ = _fetched_after_poll(run("SUCCEEDED", items=None), dataset(0))
    assert isinstance(outcome.event, e.ResultFetchFailed)
    assert outcome.event.retryable is True


# --- cancel (X5, C3) ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("answer", "expected"),
    [
        (run_result(run("ABORTING")), e.CancelAcknowledged(cancel_generation=3)),
        (run_result(run("SUCCEEDED")), e.CancelRefused(reason="the run is already SUCCEEDED")),
        (run_result(run("TIMED-OUT")), e.CancelRefused(reason="the run is already TIMED-OUT")),
    ],
)
def test_abort_outcomes(answer: Any, expected: e.Event) -> None:
    seen: list[dict[str, Any]] = []
    outcome = run_exchange(
        mapping(abort_gracefully=True).cancel(record()), serve(lambda _n, _a: answer, seen)
    )
    assert seen[0]["params"] == {
        "name": "abort-actor-run",
        "arguments": {"runId": RUN, "gracefully": True},
    }
    assert outcome.event == expected


def test_an_aborted_answer_is_the_cancelled_terminal() -> None:
    outcome = run_exchange(
        mapping().cancel(record()), serve(lambda _n, _a: run_result(run("ABORTED")))
    )
    assert isinstance(outcome.event, e.CancellationObserved)


def test_abort_failures() -> None:
    subject = mapping()
    foreign = run_exchange(
        subject.cancel(record()), serve(lambda _n, _a: run_result(run("ABORTED", run_id="run-9")))
    )
    gone = run_exchange(subject.cancel(record()), serve(not_found))
    refused = run_exchange(subject.cancel(record()), serve(lambda _n, _a: id_null(400)))
    assert isinstance(foreign.event, e.RequestFailed)
    assert foreign.event.failure is FailureKind.FOREIGN_IDENTITY
    assert isinstance(gone.event, e.OperationNotFound)
    assert isinstance(refused.event, e.RequestFailed)
    assert refused.event.request is RequestKind.CANCEL


def test_options_outside_the_servers_cap_are_refused() -> None:
    with pytest.raises(Exception, match="wait_secs"):
        mapping(wait_secs=46)
    with pytest.raises(Exception, match="start_wait_secs"):
        mapping(start_wait_secs=-1)
    with pytest.raises(Exception, match="page_limit"):
        mapping(page_limit=0)
