"""The HTTP boundary: one Streamable HTTP endpoint serving both protocol versions (S1).

Owns: ``LongcallServer`` (tools, store, options, auth, optional sessions), the Starlette
app, version routing by the request's own handshake, translation of the error tree into
JSON-RPC errors and HTTP statuses, the create-drop fault, and ``running_server`` for
tests. Must not: check requests before protocol code (``front``), hold protocol rules
(``modern``, ``legacy``) or task logic (``tasks``).

Why not the SDK's server runner: mcp 2.3.0 re-validates every ``tools/call`` result as
``CallToolResult | InputRequiredResult`` (a task result would be stripped) and ships no
2025-11-25 task runtime; see docs/design/server-on-mcp-sdk.md.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import socket
import time
from collections.abc import AsyncIterator, Callable, Mapping
from typing import Any

import uvicorn
from mcp.shared.inbound import ERROR_CODE_HTTP_STATUS
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import BaseRoute, Route
from starlette.types import ASGIApp, Receive, Scope, Send

from longcall.runtime.listen import listening_socket
from longcall.runtime.metrics import http_url
from longcall.runtime.stopping import StoppingServer
from longcall.server import legacy, modern
from longcall.server.auth import Authenticator, BearerAuth, token_principal
from longcall.server.errors import (
    INTERNAL_ERROR,
    INVALID_REQUEST,
    PARSE_ERROR,
    InvalidParams,
    JsonRpcError,
    StoreUnavailable,
    TooManyOpenTasks,
)
from longcall.server.front import (
    REASON_STORE_UNAVAILABLE,
    Handler,
    accepts,
    admit,
    guarded_jsonrpc,
    read_jsonrpc,
    store_unavailable,
)
from longcall.server.metrics import ServerMetrics
from longcall.server.model import Principal
from longcall.server.options import ServerOptions
from longcall.server.sessions import SESSION_HEADER, Session, Sessions
from longcall.server.store import TaskStore, open_store
from longcall.server.tasks import Clock, TaskManager
from longcall.server.tools import ToolRegistry
from longcall.server.transport import EventStream, uvicorn_config
from longcall.server.webhooks.model import WebhookOptions
from longcall.server.wire import RpcRequest, Streamed, error_response, response

logger = logging.getLogger(__name__)

MCP_PATH = "/mcp"


class LongcallServer:
    """Serve async Python functions as long-running MCP tools over both task protocols."""

    def __init__(
        self,
        *,
        store: TaskStore | str | None = None,
        options: ServerOptions | None = None,
        authenticator: Authenticator = token_principal,
        clock: Clock = time.time,
        webhooks: WebhookOptions | None = None,
    ) -> None:
        """``webhooks``: serve the webhook API (``/webhooks/...``) and send every status
        change of a principal's tasks to the endpoints it registered (docs/design/webhooks.md)."""
        self.options = options or ServerOptions()
        if isinstance(authenticator, BearerAuth):
            # Every 401 names the RFC 9728 metadata, served below.
            self.options = dataclasses.replace(
                self.options, resource_metadata_url=authenticator.metadata_url
            )
        self._owns_store = store is None or isinstance(store, str)
        self.store: TaskStore = (
            open_store(store) if store is None or isinstance(store, str) else store
        )
        self.registry = ToolRegistry()
        self.tool = self.registry.tool
        self.metrics = ServerMetrics(clock=clock)
        """Prometheus metrics of this server (``metrics.registry``); ``serve(metrics_port=…)``
        or ``metrics.serve(port)`` exposes them at ``/metrics``, stopped with the server."""
        self.manager = TaskManager(
            store=self.store,
            registry=self.registry,
            clock=clock,
            options=self.options,
            metrics=self.metrics,
        )
        self._authenticate = authenticator
        self.authenticate = authenticator
        self.sessions = Sessions() if self.options.stateful else None
        """2025-11-25 sessions, in stateful mode only (stateless is the default)."""
        self.routes: list[BaseRoute] = []
        """Further routes beside ``/mcp`` (the AIP-151 and Apify-style facades, S8)."""
        if isinstance(authenticator, BearerAuth):
            document = authenticator.metadata()

            async def resource_metadata(_: Request) -> Response:
                return JSONResponse(document, headers={"cache-control": "public, max-age=3600"})

            self.routes.append(Route(authenticator.metadata_path, resource_metadata))
        self.webhooks = None
        if webhooks is not None:
            from longcall.server.webhooks.routes import WebhookService

            self.webhooks = WebhookService(self, webhooks)
            self.routes.extend(self.webhooks.routes())
        self.modern = modern.ModernProtocol(manager=self.manager, options=self.options)
        self.legacy = legacy.LegacyProtocol(manager=self.manager, options=self.options)

    # ---- ASGI ----------------------------------------------------------------------------

    def asgi_app(self) -> Starlette:
        """The Starlette app serving MCP at ``/mcp``; its lifespan recovers tasks (S2).

        Its shutdown also stops serving the metrics, if they were served.
        """

        @contextlib.asynccontextmanager
        async def lifespan(_: Starlette) -> AsyncIterator[None]:
            try:
                await self.manager.start()
                try:
                    if self.webhooks is not None:
                        await self.webhooks.start()
                    yield
                finally:
                    if self.webhooks is not None:
                        await self.webhooks.stop()
                    await self.manager.stop()
                    if self._owns_store:
                        self.store.close()
            finally:
                self.metrics.close()

        endpoint = guarded_jsonrpc(self._endpoint, self.metrics.observe_refused)
        return _McpApp(
            endpoint,
            routes=[
                Route(MCP_PATH, endpoint, methods=["GET", "POST", "DELETE"]),
                *self.routes,
            ],
            lifespan=lifespan,
        )

    async def _endpoint(self, request: Request) -> Response:
        admitted = await admit(request, self.options, self._authenticate)
        principal = admitted.principal
        if request.method == "DELETE":
            if self.sessions is None:
                return Response(status_code=405)
            self.sessions.close(admitted.headers, principal.subject)
            return Response(status_code=200)
        if request.method == "GET":
            if self.sessions is not None:
                self.sessions.find(admitted.headers, principal.subject)
            return self._get_stream(admitted.headers, principal)
        message = await read_jsonrpc(request, admitted, self.options)
        session = None
        opening = message.get("method") == "initialize"
        if (
            self.sessions is not None
            and not opening
            and not modern.is_modern(message, admitted.headers)
        ):
            session = self.sessions.find(admitted.headers, principal.subject)
        reply = await self._answer(message, admitted.headers, principal, session)
        if self.sessions is not None and opening and reply.status_code == 200:
            capabilities = _params(message).get("capabilities")
            opened = self.sessions.open(
                principal.subject, capabilities if isinstance(capabilities, dict) else {}
            )
            reply.headers[SESSION_HEADER] = opened.session_id
        return reply

    def _get_stream(self, headers: Mapping[str, str], principal: Principal) -> Response:
        if not accepts(headers, "text/event-stream") or modern.is_modern({}, headers):
            return Response(status_code=405)
        return _sse(self.legacy.status_stream(principal))

    async def _answer(
        self,
        message: dict[str, Any],
        headers: Mapping[str, str],
        principal: Principal,
        session: Session | None = None,
    ) -> Response:
        if "method" not in message:
            return await self._client_response(principal, message)
        if "id" not in message:
            return Response(status_code=202)  # notifications need no answer, not even an error
        is_modern = modern.is_modern(message, headers)
        try:
            if is_modern:
                modern.check_envelope(message, headers)
            rpc = RpcRequest(
                id=message.get("id"),
                method=message["method"],
                params=_params(message),
                headers=headers,
                principal=principal,
                # Only an explicit text/event-stream asks for a stream (not */*).
                accepts_event_stream="text/event-stream" in headers.get("accept", ""),
                session_capabilities=None if session is None else session.capabilities,
            )
            protocol = self.modern if is_modern else self.legacy
            reply = await protocol.handle(rpc)
        except JsonRpcError as exc:
            return _error_reply(message.get("id"), exc, modern_status=is_modern)
        except StoreUnavailable as exc:
            self.metrics.observe_refused(REASON_STORE_UNAVAILABLE)
            return store_unavailable(message.get("id"), exc)
        except Exception:
            logger.exception("internal error answering %s", message.get("method"))
            internal = JsonRpcError(INTERNAL_ERROR, "Internal error")
            return _error_reply(message.get("id"), internal, modern_status=is_modern)
        if isinstance(reply, Streamed):
            return _sse(reply.messages)
        return JSONResponse(response(message.get("id"), reply.result))

    async def _client_response(self, principal: Principal, message: Mapping[str, Any]) -> Response:
        try:
            await self.legacy.answer_side_channel(principal, message)
        except JsonRpcError as exc:
            return JSONResponse(error_response(None, exc.to_wire()), status_code=400)
        return Response(status_code=202)

    # ---- running -----------------------------------------------------------------------

    async def serve(
        self,
        *,
        host: str = "127.0.0.1",
        port: int = 8765,
        metrics_port: int | None = None,
        metrics_host: str = "127.0.0.1",
        sock: socket.socket | None = None,
    ) -> None:
        """Serve until cancelled or interrupted; with ``metrics_port`` (0: a free one) also
        Prometheus text at ``http://METRICS_HOST:PORT/metrics`` (``self.metrics.port``),
        stopped with the server. ``sock``, a socket already listening (from
        :func:`listening_socket`, say, to learn the port 0 chose), replaces host and port
        and is closed with the server."""
        config = uvicorn_config(self.asgi_app(), self.options)
        try:
            with sock if sock is not None else listening_socket(host, port) as listener:
                if metrics_port is not None and self.metrics.port is None:
                    self.metrics.serve(metrics_port, host=metrics_host)
                # A signal stops it without waiting on open streams (StoppingServer).
                await StoppingServer(config).serve(sockets=[listener])
        finally:
            self.metrics.close()


@contextlib.asynccontextmanager
async def running_server(
    server: LongcallServer,
    *,
    host: str = "127.0.0.1",
    wrap: Callable[[ASGIApp], ASGIApp] | None = None,
) -> AsyncIterator[str]:
    """Serve on a free port of ``host`` for the duration; yields the MCP endpoint URL.
    ``wrap`` puts an ASGI layer of the caller's in front of the server's app.

    The socket is bound and listening before the URL is handed out, so no wait is needed:
    connections queue in the backlog until uvicorn has run the lifespan (recovery).
    """
    sock = listening_socket(host, 0)
    port = sock.getsockname()[1]
    app = server.asgi_app() if wrap is None else wrap(server.asgi_app())
    config = uvicorn_config(app, server.options, timeout_graceful_shutdown=1, lifespan="on")
    uv = uvicorn.Server(config)
    serving = asyncio.get_running_loop().create_task(uv.serve(sockets=[sock]))
    try:
        yield http_url(host, port, MCP_PATH)
    finally:
        uv.should_exit = True
        with contextlib.suppress(asyncio.CancelledError):
            await serving
        sock.close()


class _McpApp(Starlette):
    """Starlette, with each ``POST /mcp`` handed straight to the MCP endpoint.

    That endpoint answers everything itself — refusals and unexpected errors included
    (``guarded_jsonrpc``) — so on the busiest path the router and the exception
    middlewares around it only cost time. Every other request (GET streams, DELETE,
    the facades, the lifespan), and every request once a caller added middleware,
    goes the ordinary way."""

    def __init__(self, mcp_endpoint: Handler, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._mcp_endpoint = mcp_endpoint

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if (
            scope["type"] == "http"
            and scope["method"] == "POST"
            and scope["path"] == MCP_PATH
            and not scope.get("root_path")
            and not self.user_middleware
        ):
            scope["app"] = self
            response = await self._mcp_endpoint(Request(scope, receive, send))
            await response(scope, receive, send)
            return
        await super().__call__(scope, receive, send)


# ---- framing helpers -----------------------------------------------------------------------


def _params(message: Mapping[str, Any]) -> dict[str, Any]:
    params = message.get("params", {})
    if params is None:
        return {}
    if not isinstance(params, dict):
        raise InvalidParams("params must be an object")
    return params


def _error_reply(request_id: Any, error: JsonRpcError, *, modern_status: bool) -> Response:
    status = ERROR_CODE_HTTP_STATUS.get(error.code, 200) if modern_status else 200
    if error.code in (PARSE_ERROR, INVALID_REQUEST):
        status = 400
    if isinstance(error, TooManyOpenTasks):
        status = 429  # both versions: the caller should back off, not resend at once
    return JSONResponse(error_response(request_id, error.to_wire()), status_code=status)


def _sse(messages: AsyncIterator[dict[str, Any]]) -> Response:
    return EventStream(messages)
