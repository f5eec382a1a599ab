"""The table of refusals that prove a create was never made and would be refused again
(413, a parse error answering nobody): each becomes the call's terminal error, every
other refusal keeps its own path (retried, lost, or an operator's) (X2, X9)."""

from __future__ import annotations

import json

import pytest

from longcall.adapters.exchange import HttpReply, TransportFailure, status_failure
from longcall.adapters.mcp.rpc import RpcChannel
from longcall.adapters.outcomes import submit_failed
from longcall.core import events as e
from longcall.core.retry import FailureKind, RequestKind, is_retryable, settles_create


def rpc_error(status: int, code: int, message: str, request_id: object = None) -> HttpReply:
    body = {"jsonrpc": "2.0", "id": request_id, "error": {"code": code, "message": message}}
    return HttpReply(
        status=status, headers={"content-type": "application/json"}, body=json.dumps(body).encode()
    )


def plain(status: int, text: str = "no") -> HttpReply:
    return HttpReply(status=status, headers={"content-type": "text/plain"}, body=text.encode())


@pytest.mark.parametrize(
    ("reply", "kind", "event"),
    [
        (rpc_error(413, -32600, "request body over 4096 bytes"), FailureKind.REFUSED_UNREAD,
         e.SubmitRejected),
        (plain(413, "Payload Too Large"), FailureKind.REFUSED_UNREAD, e.SubmitRejected),
        (rpc_error(400, -32700, "Parse error: nested deeper than 64"), FailureKind.REFUSED_UNREAD,
         e.SubmitRejected),
        # A 400 about the session or the framing: not proof that these bytes never fit.
        (rpc_error(400, -32600, "Bad Request: no valid session"), FailureKind.BAD_REQUEST,
         e.RequestFailed),
        # The reference server's answer to an upload cut in transit: resent whole, it passes.
        (rpc_error(400, -32600, "the request body ended early"), FailureKind.BAD_REQUEST,
         e.RequestFailed),
        (plain(400), FailureKind.BAD_REQUEST, e.RequestFailed),
        (plain(401), FailureKind.UNAUTHORIZED, e.RequestFailed),
        (plain(429), FailureKind.RATE_LIMITED, e.RequestFailed),
        (plain(503), FailureKind.UNAVAILABLE, e.SubmitOutcomeLost),
        (plain(500), FailureKind.SERVER_ERROR, e.SubmitOutcomeLost),
    ],
)  # fmt: skip
def test_what_a_refused_create_comes_to(reply: HttpReply, kind: FailureKind, event: type) -> None:
    """Each refusal's kind, and what it makes of a create."""
    channel = RpcChannel()
    _request, request_id = channel.request("tools/call", {})
    failure = channel.read(reply, request_id)
    if not isinstance(failure, TransportFailure):  # a plain body: the status speaks
        failure = status_failure(reply)
    assert isinstance(failure, TransportFailure)
    assert failure.kind is kind
    outcome = submit_failed(failure)
    assert type(outcome.event) is event
    if event is e.SubmitRejected:
        assert outcome.payload is not None
        assert b"refused the request unread" in outcome.payload


@pytest.mark.parametrize("request_kind", list(RequestKind))
@pytest.mark.parametrize("failure", list(FailureKind))
def test_only_a_create_refused_unread_settles_the_call(
    request_kind: RequestKind, failure: FailureKind
) -> None:
    """The core's rule, over every pair: never retried, and the outcome only of a create."""
    expected = request_kind is RequestKind.SUBMIT and failure is FailureKind.REFUSED_UNREAD
    assert settles_create(request_kind, failure) is expected
    if failure is FailureKind.REFUSED_UNREAD:
        assert not is_retryable(failure)
