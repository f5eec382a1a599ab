"""Redirects the driver follows: 307/308 to the same origin, a few hops, method, body and
credentials kept; never to another origin; a refused redirect says what happened.

Regression: a server mounted at ``/mcp`` by Starlette ``Mount`` answers ``POST /mcp``
with 307 to ``/mcp/`` (the MCP SDKs' own clients follow it); the driver did not follow
it, so every request failed with "HTTP 307".
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import AsyncIterator
from typing import Any

import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, RedirectResponse, Response
from starlette.routing import Mount, Route
from tests.e2e.conftest import serve

from longcall.adapters.exchange import HttpReply, HttpRequest, TransportFailure
from longcall.adapters.http import HttpDriver
from longcall.adapters.mcp.client import connect
from longcall.adapters.redirects import REDIRECTS_MAX, next_hop, origin
from longcall.core.retry import FailureKind
from longcall.errors import NegotiationFailed

pytestmark = pytest.mark.anyio

BODY = b'{"jsonrpc":"2.0","id":1,"method":"tools/list"}'
TOKEN = "Bearer s3cret"


class Seen:
    """What one test server received: method, path, body and credentials per request."""

    def __init__(self) -> None:
        self.requests: list[dict[str, Any]] = []

    async def note(self, request: Request) -> None:
        self.requests.append(
            {
                "method": request.method,
                "path": request.url.path,
                "body": await request.body(),
                "authorization": request.headers.get("authorization"),
            }
        )


def mounted(seen: Seen) -> Starlette:
    """An endpoint under a real Starlette ``Mount("/mcp")``: ``POST /mcp`` is answered by
    Starlette itself with 307 to ``/mcp/``."""

    async def echo(request: Request) -> Response:
        await seen.note(request)
        return JSONResponse({"jsonrpc": "2.0", "id": 1, "result": {"path": request.url.path}})

    inner = Starlette(routes=[Route("/", echo, methods=["POST", "GET"])])
    return Starlette(routes=[Mount("/mcp", app=inner)])


def redirecting(seen: Seen, to: str, status: int = 307) -> Starlette:
    """Answers every request with a redirect to ``to`` (relative or absolute)."""

    async def redirect(request: Request) -> Response:
        await seen.note(request)
        return RedirectResponse(to, status_code=status)

    return Starlette(routes=[Route("/{path:path}", redirect, methods=["POST", "GET"])])


@contextlib.asynccontextmanager
async def driver(url: str) -> AsyncIterator[HttpDriver]:
    http = HttpDriver(url, headers={"authorization": TOKEN})
    try:
        yield http
    finally:
        await http.aclose()


def post() -> HttpRequest:
    return HttpRequest(
        method="POST", headers={"content-type": "application/json"}, body=BODY, timeout_s=10.0
    )


async def test_a_starlette_mount_307_is_followed_with_method_body_and_credentials() -> None:
    """POST /mcp -> 307 /mcp/ (Starlette Mount) -> the same POST, body and token at /mcp/."""
    seen = Seen()
    async with serve(mounted(seen)) as url, driver(url) as http:
        assert url.endswith("/mcp")
        reply = await http.send(post())
    assert isinstance(reply, HttpReply), reply
    assert reply.status == 200
    assert json.loads(reply.body)["result"] == {"path": "/mcp/"}
    assert seen.requests == [
        {"method": "POST", "path": "/mcp/", "body": BODY, "authorization": TOKEN}
    ]


async def test_a_redirect_to_another_origin_is_refused_and_sends_nothing_there() -> None:
    """307 to another port of the same host (another origin): not followed, a typed
    failure saying so, and the other server never sees the request or the token."""
    elsewhere, here = Seen(), Seen()
    async with (
        serve(mounted(elsewhere)) as other,
        serve(redirecting(here, other + "/")) as url,
        driver(url) as http,
    ):
        reply = await http.send(post())
    assert isinstance(reply, TransportFailure), reply
    assert reply.kind is FailureKind.REDIRECT_REFUSED
    assert reply.processed_possible is False
    assert "another origin" in reply.detail
    assert other in reply.detail
    assert TOKEN not in reply.detail
    assert len(here.requests) == 1
    assert elsewhere.requests == []


async def test_negotiation_names_a_refused_redirect() -> None:
    """`connect` to a server that redirects to another origin fails saying so."""
    elsewhere, here = Seen(), Seen()
    async with serve(mounted(elsewhere)) as other, serve(redirecting(here, other + "/")) as url:
        with pytest.raises(NegotiationFailed, match="another origin, not followed"):
            await connect(url)
    assert elsewhere.requests == []


async def test_a_redirect_loop_stops_after_the_hop_limit() -> None:
    """A server redirecting to itself forever: REDIRECTS_MAX hops, then a refusal."""
    seen = Seen()
    async with serve(redirecting(seen, "/mcp")) as url, driver(url) as http:
        reply = await http.send(post())
    assert isinstance(reply, TransportFailure), reply
    assert reply.kind is FailureKind.REDIRECT_REFUSED
    assert f"more than {REDIRECTS_MAX} redirects" in reply.detail
    assert len(seen.requests) == REDIRECTS_MAX + 1
    assert {r["body"] for r in seen.requests} == {BODY}


async def test_a_302_is_not_followed() -> None:
    """301/302/303 would turn the POST into a GET: refused, saying why."""
    seen = Seen()
    async with serve(redirecting(seen, "/mcp/", status=302)) as url, driver(url) as http:
        reply = await http.send(post())
    assert isinstance(reply, TransportFailure), reply
    assert reply.kind is FailureKind.REDIRECT_REFUSED
    assert "only 307 and 308" in reply.detail
    assert len(seen.requests) == 1


@pytest.mark.parametrize(
    ("url", "location", "expected"),
    [
        ("http://h/mcp", "/mcp/", "http://h/mcp/"),
        ("http://h/mcp", "http://h:80/mcp/", "http://h:80/mcp/"),
        ("https://H:443/mcp", "https://h/x", "https://h/x"),
        ("http://h:8000/mcp", "mcp/", "http://h:8000/mcp/"),
    ],
)
def test_same_origin_targets(url: str, location: str, expected: str) -> None:
    """Relative and absolute targets with the same scheme, host and (default) port."""
    assert next_hop(url, 308, location, hops=0) == expected


@pytest.mark.parametrize(
    "location", ["https://h/mcp/", "http://other/mcp/", "http://h:8080/mcp/", "//evil/mcp"]
)
def test_other_origins_are_refused(location: str) -> None:
    """Another scheme, host or port is another origin."""
    hop = next_hop("http://h/mcp", 307, location, hops=0)
    assert isinstance(hop, TransportFailure)
    assert hop.kind is FailureKind.REDIRECT_REFUSED


def test_not_a_redirect() -> None:
    """Other statuses, and a 3xx without Location, are left to the reader."""
    assert next_hop("http://h/mcp", 200, "/x", hops=0) is None
    assert next_hop("http://h/mcp", 307, None, hops=0) is None
    assert origin("HTTP://H/") == ("http", "h", 80)


@pytest.mark.parametrize("status", [301, 302, 303])
def test_a_refused_301_302_303_may_follow_a_processed_post(status: int) -> None:
    """A 303 (or 301/302) is the ordinary reply after a server processed a POST: its
    refusal says the request may have been processed (X2)."""
    hop = next_hop("http://h/mcp", status, "/done", hops=0)
    assert isinstance(hop, TransportFailure)
    assert hop.processed_possible is True


@pytest.mark.parametrize("status", [307, 308])
def test_a_refused_307_308_proves_the_request_was_not_processed(status: int) -> None:
    """Only the target of a 307/308 would have processed it: refused, nothing happened."""
    hop = next_hop("http://h/mcp", status, "http://other/mcp", hops=0)
    assert isinstance(hop, TransportFailure)
    assert hop.processed_possible is False
    over = next_hop("http://h/mcp", status, "/mcp/", hops=REDIRECTS_MAX)
    assert isinstance(over, TransportFailure)
    assert over.processed_possible is False


@pytest.mark.parametrize("status", [302, 307])
def test_a_refused_redirect_message_shows_no_query_or_userinfo(status: int) -> None:
    """Userinfo and query strings (an API key) never reach the refusal's message (C1)."""
    hop = next_hop(
        "http://u:pw@h:8000/mcp?api_key=s3cret#f",
        status,
        "https://k:pw2@other/mcp/?token=t0ken",
        hops=0,
    )
    assert isinstance(hop, TransportFailure)
    for secret in ("s3cret", "t0ken", "pw", "u:", "k:", "#f"):
        assert secret not in hop.detail
    assert "http://h:8000/mcp" in hop.detail
    assert "https://other/mcp/" in hop.detail
