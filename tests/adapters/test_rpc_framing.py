"""Whether an HTTP reply is the answer to OUR request (C3), and the event-stream format.

Regressions: a 406 (or any status that is not an answer) whose JSON-RPC error has
``id: null`` was read as the task's own error and accepted; ``tasks/result`` went out
accepting JSON only; an SSE priming event (an id, empty data) broke the client.
"""

from __future__ import annotations

import json
from collections.abc import Callable

import pytest

from longcall.adapters.exchange import HttpReply, HttpRequest, TransportFailure, run_exchange
from longcall.adapters.mcp.rpc import ACCEPT, RpcAnswer, RpcChannel, call, open_session
from longcall.adapters.sse import LineTooLong, SseDecoder, decode_all, encode_event
from longcall.core.retry import FailureKind


def json_reply(message: object, *, status: int = 200, **headers: str) -> HttpReply:
    return HttpReply(
        status=status,
        headers={"content-type": "application/json", **headers},
        body=json.dumps(message).encode(),
    )


def sse_reply(*chunks: bytes, status: int = 200) -> HttpReply:
    return HttpReply(
        status=status, headers={"content-type": "text/event-stream"}, body=b"".join(chunks)
    )


def channel_and_id() -> tuple[RpcChannel, int]:
    channel = RpcChannel()
    request, request_id = channel.request("tasks/result", {"taskId": "t1"})
    assert request.headers["accept"] == ACCEPT  # both, on every request
    return channel, request_id


def test_every_request_accepts_json_and_event_stream() -> None:
    """Streamable HTTP: a client accepts both media types on every POST."""
    channel = RpcChannel()
    for method in ("tools/call", "tasks/get", "tasks/result", "tasks/cancel"):
        request, _ = channel.request(method, {})
        assert set(request.headers["accept"].split(", ")) == {
            "application/json",
            "text/event-stream",
        }


@pytest.mark.parametrize("status", [400, 406, 415, 200])
def test_an_error_with_a_null_id_is_a_transport_failure(status: int) -> None:
    """A JSON-RPC error about no request of ours is never an operation's outcome (C3)."""
    channel, request_id = channel_and_id()
    error = {"code": -32000, "message": "Not Acceptable: Client must accept both"}
    reply = json_reply({"jsonrpc": "2.0", "id": None, "error": error}, status=status)
    answer = channel.read(reply, request_id)
    assert isinstance(answer, TransportFailure)
    assert answer.kind is FailureKind.BAD_REQUEST
    assert answer.processed_possible is False


def test_an_error_answering_our_id_is_the_answer() -> None:
    """The same error with our request's id is the answer (it may be the task's own)."""
    channel, request_id = channel_and_id()
    error = {"code": -32602, "message": "Task not found"}
    answer = channel.read(json_reply({"jsonrpc": "2.0", "id": request_id, "error": error}), 1)
    assert answer == RpcAnswer(error=error)


def test_an_answer_to_another_request_is_not_ours() -> None:
    """A result with another id is malformed, never read as ours."""
    channel, request_id = channel_and_id()
    reply = json_reply({"jsonrpc": "2.0", "id": request_id + 7, "result": {}})
    answer = channel.read(reply, request_id)
    assert isinstance(answer, TransportFailure)
    assert answer.kind is FailureKind.MALFORMED_RESPONSE


@pytest.mark.parametrize(
    ("status", "kind", "processed"),
    [
        (401, FailureKind.UNAUTHORIZED, False),
        (403, FailureKind.FORBIDDEN, False),
        (406, FailureKind.BAD_REQUEST, False),
        (429, FailureKind.RATE_LIMITED, False),
        (500, FailureKind.SERVER_ERROR, True),
        (503, FailureKind.UNAVAILABLE, True),
    ],
)
def test_statuses_that_are_not_answers(status: int, kind: FailureKind, processed: bool) -> None:
    """Whatever the body says, these statuses carry no answer (X9, C3)."""
    channel, request_id = channel_and_id()
    body = {"jsonrpc": "2.0", "id": request_id, "result": {"status": "failed"}}
    answer = channel.read(json_reply(body, status=status, **{"retry-after": "3"}), request_id)
    assert isinstance(answer, TransportFailure)
    assert (answer.kind, answer.processed_possible, answer.http_status) == (kind, processed, status)
    assert answer.retry_after_s == 3.0


def test_priming_events_and_keepalives_are_skipped() -> None:
    """SEP-1699: an event with an id and empty data primes the stream; it is no message."""
    channel, request_id = channel_and_id()
    body = {"jsonrpc": "2.0", "id": request_id, "result": {"content": []}}
    reply = sse_reply(
        b"id: prime-1\ndata:\n\n",
        b": keep-alive\n\n",
        b"retry: 1500\n\n",
        encode_event(json.dumps({"jsonrpc": "2.0", "method": "notifications/progress"})),
        encode_event(json.dumps(body), id="e-2"),
    )
    answer = channel.read(reply, request_id)
    assert isinstance(answer, RpcAnswer)
    assert answer.result == {"content": []}
    assert [m["method"] for m in answer.messages] == ["notifications/progress"]


def test_a_stream_that_ends_before_the_answer_is_a_transport_failure() -> None:
    """No answer on a finished stream: the request may have been processed."""
    channel, request_id = channel_and_id()
    answer = channel.read(sse_reply(b"id: 1\ndata:\n\n"), request_id)
    assert isinstance(answer, TransportFailure)
    assert (answer.kind, answer.processed_possible) == (FailureKind.TRANSPORT, True)


def test_a_null_id_error_on_a_stream_is_a_transport_failure() -> None:
    """C3 holds on event streams too."""
    channel, request_id = channel_and_id()
    error = {"jsonrpc": "2.0", "id": None, "error": {"code": -32600, "message": "bad"}}
    answer = channel.read(sse_reply(encode_event(json.dumps(error))), request_id)
    assert isinstance(answer, TransportFailure)


def _stateful(issued: str) -> Callable[[HttpRequest], HttpReply]:
    """Answers as the Python SDK 1.x in stateful mode: without a session only
    ``initialize`` is served, and every reply, a refusal included, carries a fresh id."""
    fresh = iter(f"{issued}-{n}" for n in range(100))

    def serve(request: HttpRequest) -> HttpReply:
        body = request.json_body
        if "mcp-session-id" not in request.headers and body.get("method") != "initialize":
            refusal = {"jsonrpc": "2.0", "id": "server-error", "error": MISSING_SESSION}
            return json_reply(refusal, status=400, **{"mcp-session-id": next(fresh)})
        if "id" not in body:
            return HttpReply(status=202, headers={"mcp-session-id": issued})
        result = {"protocolVersion": "2025-11-25", "capabilities": {}}
        return json_reply(
            {"jsonrpc": "2.0", "id": body["id"], "result": result}, **{"mcp-session-id": issued}
        )

    return serve


MISSING_SESSION = {"code": -32600, "message": "Bad Request: Missing session ID"}


def test_the_session_id_issued_with_initialize_is_sent_back() -> None:
    """The ``Mcp-Session-Id`` of the answer to ``initialize`` rides on every later request."""
    channel = RpcChannel()
    run_exchange(open_session(channel), _stateful("s-9"))
    request, _ = channel.request("tasks/get", {})
    assert request.headers["mcp-session-id"] == "s-9"


def test_a_failed_probe_leaves_no_session_behind() -> None:
    """A 400 "Missing session ID" to ``server/discover`` carries a fresh session id (the
    Python SDK 1.x): it is not taken, so ``initialize`` goes out without one."""
    channel = RpcChannel()
    sent: list[HttpRequest] = []
    serve = _stateful("s-1")

    def recording(request: HttpRequest) -> HttpReply:
        sent.append(request)
        return serve(request)

    refused = run_exchange(call(channel, "server/discover", {}), recording)
    assert isinstance(refused, TransportFailure)
    assert refused.http_status == 400
    assert channel.session_id is None
    assert channel.session_expired is False
    opened = run_exchange(open_session(channel), recording)
    assert isinstance(opened, dict)
    assert "mcp-session-id" not in sent[1].headers
    assert channel.session_id == "s-1"


def test_initialize_never_carries_a_session() -> None:
    """``initialize`` opens a session: it goes out without the one the channel holds."""
    channel = RpcChannel()
    channel.session_id = "old"
    request, _ = channel.request("initialize", {})
    assert "mcp-session-id" not in request.headers
    assert channel.request("tasks/get", {})[0].headers["mcp-session-id"] == "old"


def test_decoder_handles_split_chunks_crlf_and_multiline_data() -> None:
    """Events complete across chunk boundaries, with CRLF or CR line ends."""
    decoder = SseDecoder()
    events = decoder.feed(b"id: 7\r\ndata: a\r\nda")
    assert events == []
    events = decoder.feed(b"ta: b\r\n\r\nevent: x\rdata: c\r\r")
    assert [(e.data, e.id, e.event) for e in events] == [("a\nb", "7", "message")]
    # A CR at the end of a chunk may be half a CRLF: the event completes with the next.
    events = decoder.feed(b"\n")
    assert [(e.data, e.id, e.event) for e in events] == [("c", None, "x")]
    assert decoder.last_event_id == "7"


def test_decoder_caps_line_length() -> None:
    """An endless line is a typed failure, not unbounded memory (C4)."""
    decoder = SseDecoder(line_bytes_max=1000)
    with pytest.raises(LineTooLong):
        decoder.feed(b"data: " + b"x" * 2000)
    with pytest.raises(LineTooLong):
        decode_all(b"data: " + b"x" * 2000 + b"\n\n", line_bytes_max=1000)


def test_a_broken_stream_is_resumed_with_last_event_id() -> None:
    """Streamable HTTP: a POST stream cut before the answer is resumed by GET with
    Last-Event-ID after the server's ``retry:``; the answer found there counts."""
    from longcall.adapters.exchange import run_exchange
    from longcall.adapters.mcp.rpc import call

    channel = RpcChannel()
    sent: list[HttpRequest] = []

    def serve(request: HttpRequest) -> HttpReply:
        sent.append(request)
        if request.method == "POST":
            return sse_reply(b"id: e1\nretry: 250\ndata:\n\n")
        answer = {"jsonrpc": "2.0", "id": 1, "result": {"ok": True}}
        return sse_reply(encode_event(json.dumps(answer), id="e2"))

    answer = run_exchange(call(channel, "tools/call", {}), serve)
    assert isinstance(answer, RpcAnswer)
    assert answer.result == {"ok": True}
    get = sent[1]
    assert (get.method, get.headers["last-event-id"], get.delay_s) == ("GET", "e1", 0.25)


def test_resuming_stops_after_a_bound() -> None:
    """A server that never answers on resumed streams ends as a transport failure."""
    from longcall.adapters.exchange import run_exchange
    from longcall.adapters.mcp.rpc import RESUMES_MAX, call

    sent: list[HttpRequest] = []

    def serve(request: HttpRequest) -> HttpReply:
        sent.append(request)
        return sse_reply(f"id: e{len(sent)}\ndata:\n\n".encode())

    answer = run_exchange(call(RpcChannel(), "tools/call", {}), serve)
    assert isinstance(answer, TransportFailure)
    assert len(sent) == 1 + RESUMES_MAX


def test_x_mcp_header_arguments_become_param_headers() -> None:
    """SEP-2243: designated arguments ride in ``Mcp-Param-*`` headers, encoded; null or
    absent ones are left out; an invalid declaration excludes the tool."""
    from longcall.adapters.mcp.tools import header_params, param_headers
    from longcall.errors import InvalidToolHeaders

    tool = {
        "name": "t",
        "inputSchema": {
            "type": "object",
            "properties": {
                "region": {"type": "string", "x-mcp-header": "Region"},
                "priority": {"type": "integer", "x-mcp-header": "Priority"},
                "verbose": {"type": "boolean", "x-mcp-header": "Verbose"},
                "name": {"type": "string", "x-mcp-header": "Name"},
                "query": {"type": "string"},
            },
        },
    }
    params = header_params(tool)
    assert params == {
        "region": "Region",
        "priority": "Priority",
        "verbose": "Verbose",
        "name": "Name",
    }
    headers = param_headers(params, {"region": "eu", "priority": 3, "verbose": None, "name": " x"})
    assert headers == {
        "mcp-param-region": "eu",
        "mcp-param-priority": "3",
        "mcp-param-name": "=?base64?IHg=?=",
    }
    for bad in ("", "has space", "dup"):
        properties = {"a": {"type": "string", "x-mcp-header": bad or ""}}
        if bad == "dup":
            properties = {
                "a": {"type": "string", "x-mcp-header": "Dup"},
                "b": {"type": "string", "x-mcp-header": "dup"},
            }
        with pytest.raises(InvalidToolHeaders):
            header_params({"name": "t", "inputSchema": {"properties": properties}})
    with pytest.raises(InvalidToolHeaders):
        header_params(
            {"inputSchema": {"properties": {"o": {"type": "object", "x-mcp-header": "O"}}}}
        )


def _session_server(refuse: int) -> tuple[list[HttpRequest], Callable[[HttpRequest], HttpReply]]:
    """A stateful server whose session ``s-1`` is gone: requests carrying it get
    ``refuse`` (404: the session ended; 503: the server could not say), ``initialize``
    opens ``s-2``, and requests in ``s-2`` are answered."""
    sent: list[HttpRequest] = []

    def serve(request: HttpRequest) -> HttpReply:
        sent.append(request)
        body = request.json_body
        if request.headers.get("mcp-session-id") == "s-1":
            refusal = {"jsonrpc": "2.0", "id": "server-error", "error": MISSING_SESSION}
            return json_reply(refusal, status=refuse)
        if "id" not in body:
            return HttpReply(status=202)
        result = {"protocolVersion": "2025-11-25", "capabilities": {}}
        if body["method"] != "initialize":
            result = {"task": {"taskId": "t", "status": "working"}}
        return json_reply(
            {"jsonrpc": "2.0", "id": body["id"], "result": result}, **{"mcp-session-id": "s-2"}
        )

    return sent, serve


def _in_session(session: str) -> RpcChannel:
    channel = RpcChannel()
    channel.session_id = session
    channel.initialized = {"protocolVersion": "2025-11-25", "capabilities": {}}
    return channel


def test_a_create_refused_for_its_session_is_sent_again_in_a_new_one() -> None:
    """404 to a create that carried our session: the server ended the session before it
    read the create, so one new session is opened and the create sent again, once."""
    sent, serve = _session_server(404)
    channel = _in_session("s-1")
    answer = run_exchange(call(channel, "tools/call", {"name": "t", "task": {}}), serve)
    assert isinstance(answer, RpcAnswer), answer
    assert answer.result == {"task": {"taskId": "t", "status": "working"}}
    methods = [(r.json_body["method"], r.headers.get("mcp-session-id")) for r in sent]
    assert methods == [
        ("tools/call", "s-1"),
        ("initialize", None),
        ("notifications/initialized", "s-2"),
        ("tools/call", "s-2"),
    ]
    assert channel.session_id == "s-2"
    assert channel.session_expired is False


def test_a_create_whose_fate_is_unknown_is_never_sent_again() -> None:
    """A 503 (or a timeout) to a create proves nothing: no new session, no resend; the
    executor resolves it (submission-key lookup, X2)."""
    sent, serve = _session_server(503)
    channel = _in_session("s-1")
    answer = run_exchange(call(channel, "tools/call", {"name": "t", "task": {}}), serve)
    assert isinstance(answer, TransportFailure)
    assert answer.processed_possible is True
    assert [r.json_body["method"] for r in sent] == ["tools/call"]
    assert channel.session_id == "s-1"


def test_a_404_without_a_session_is_just_a_404() -> None:
    """A stateless server's 404 (a wrong path) opens no session."""
    sent: list[HttpRequest] = []
    channel = RpcChannel()

    def not_found(request: HttpRequest) -> HttpReply:
        sent.append(request)
        return HttpReply(status=404, body=b"no such path")

    answer = run_exchange(call(channel, "tasks/get", {"taskId": "t"}), not_found)
    assert isinstance(answer, TransportFailure)
    assert answer.http_status == 404
    assert len(sent) == 1
    assert channel.session_expired is False


def _ended(request: HttpRequest) -> HttpReply:
    """A stateful server's 404 to a request in a session it ended (answers nothing)."""
    return json_reply(
        {"jsonrpc": "2.0", "id": None, "error": {"code": -32600, "message": "Session not found"}},
        status=404,
    )


def _initialized(request: HttpRequest, session: str, capabilities: object) -> HttpReply:
    result = {"protocolVersion": "2025-11-25", "capabilities": capabilities}
    body = {"jsonrpc": "2.0", "id": request.json_body["id"], "result": result}
    return json_reply(body, **{"mcp-session-id": session})


TASKS = {"tasks": {"requests": {"tools": {"call": {}}}}}
CREATE = {"name": "slow", "arguments": {}, "task": {"ttl": 60000}}


def test_a_late_404_resends_in_the_session_another_request_reopened() -> None:
    """Two requests in session s-1 both meet its end; the first re-opens s-2 and resends
    there; the second, refused later, resends in s-2 too: one re-open, no s-3 (X2)."""
    channel = RpcChannel()
    channel.session_id, channel.initialized = "s-1", {"protocolVersion": "2025-11-25"}
    first, second = call(channel, "tools/call", CREATE), call(channel, "tasks/get", {})
    sent_first, sent_second = next(first), next(second)
    assert sent_first.headers["mcp-session-id"] == sent_second.headers["mcp-session-id"] == "s-1"
    initialize = first.send(_ended(sent_first))
    assert initialize.json_body["method"] == "initialize"
    notified = first.send(_initialized(initialize, "s-2", {}))
    resent_first = first.send(HttpReply(status=202, headers={}))
    assert resent_first.json_body["method"] == "tools/call"
    assert resent_first.headers["mcp-session-id"] == "s-2"
    assert notified.json_body["method"] == "notifications/initialized"
    resent_second = second.send(_ended(sent_second))
    assert resent_second.json_body["method"] == "tasks/get"
    assert resent_second.headers["mcp-session-id"] == "s-2"
    assert channel.session_id == "s-2"


@pytest.mark.parametrize(("version", "capabilities"), [("2025-06-18", TASKS), ("2025-11-25", {})])
def test_a_create_is_not_resent_in_a_session_on_other_terms(
    version: str, capabilities: object
) -> None:
    """A re-opened session on another version, or without tasks, gets no resent create:
    the 404 (not processed) stands, and only ``initialize`` followed it."""
    channel = RpcChannel()
    channel.session_id = "s-1"
    channel.initialized = {"protocolVersion": "2025-11-25", "capabilities": TASKS}
    exchange = call(channel, "tools/call", CREATE)
    refused = next(exchange)
    initialize = exchange.send(_ended(refused))
    result = {"protocolVersion": version, "capabilities": capabilities}
    body = {"jsonrpc": "2.0", "id": initialize.json_body["id"], "result": result}
    notified = exchange.send(json_reply(body, **{"mcp-session-id": "s-2"}))
    assert notified.json_body["method"] == "notifications/initialized"
    with pytest.raises(StopIteration) as stop:
        exchange.send(HttpReply(status=202, headers={}))
    answer = stop.value.value
    assert isinstance(answer, TransportFailure)
    assert answer.processed_possible is False
