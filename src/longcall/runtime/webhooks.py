"""The caller's webhook receiver: a signed delivery only makes a poll come sooner (X3, S7).

Owns: turning one delivery (headers and body) into an answer (status, reason) — verify
it (:mod:`longcall.adapters.webhooks`), read the operation it names, and ask the
executor to wake that operation's poll (:meth:`Executor.hint`, the same
``notify`` → ``Engine.wake`` path the push listeners take, floored by the server's
interval) — plus a small ASGI app serving it as ``POST /webhooks``.
Must not: move a record, accept anything a delivery carries, or answer 2xx to a delivery
that did not verify. A delivery is a hint: forged, replayed, reordered or delayed, it can
change only when the next poll happens, and the poll's reply is the truth.

The payload taken (JSON), the MCP task status shape, under ``data`` (a webhook event) or
``params`` (a ``notifications/tasks/status`` message)::

    {"type": "task.status", "data": {"taskId": "…", "status": "completed"}}

``taskId`` (the server's operation id) and/or ``callNodeId`` (ours) name the operation;
``status`` is optional and only filters: a status equal to the one last polled wakes
nothing. Other fields are ignored.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import json
import logging
import socket
import threading
from collections import Counter
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from longcall.adapters.webhooks import Verifier
from longcall.errors import WebhookMalformed, WebhookPortUnavailable, WebhookRejected
from longcall.runtime.listen import listening_socket

if TYPE_CHECKING:
    from starlette.applications import Starlette

log = logging.getLogger("longcall.webhooks")

PATH = "/webhooks"
BODY_MAX_BYTES = 1 << 20
"""A status change is a few hundred bytes; a megabyte is refused unread (413)."""


class Hinted(Protocol):
    """What a receiver asks of the process it serves: its clock, and to wake the polls
    a delivery names (:class:`~longcall.runtime.executor.Executor`; the simulator's
    processes, :mod:`longcall.sim.webhooks`)."""

    @property
    def clock(self) -> Callable[[], float]: ...

    def hint(
        self,
        *,
        operation_id: str | None = None,
        call_node_id: str | None = None,
        status: str | None = None,
        server: str | None = None,
    ) -> concurrent.futures.Future[list[str]]: ...


@dataclass(frozen=True, slots=True, kw_only=True)
class Named:
    """What a verified payload names: the operation (either id), and the status claimed."""

    operation_id: str | None
    call_node_id: str | None
    status: str | None


@dataclass(frozen=True, slots=True, kw_only=True)
class WebhookAnswer:
    """The answer to one delivery; ``woken`` resolves to the call nodes whose poll was
    moved (None when nothing was asked of the executor)."""

    status: int
    reason: str
    woken: concurrent.futures.Future[list[str]] | None = None


def read_payload(body: bytes) -> Named:
    """The operation a verified body names, or WebhookMalformed."""
    try:
        payload = json.loads(body)
    except (ValueError, RecursionError):
        raise WebhookMalformed("the payload is not JSON") from None
    if not isinstance(payload, dict):
        raise WebhookMalformed("the payload is not a JSON object")
    data = payload.get("data", payload.get("params"))
    if not isinstance(data, dict):
        raise WebhookMalformed("the payload has no data object")
    fields = {name: data.get(name) for name in ("taskId", "callNodeId", "status")}
    for name, value in fields.items():
        if value is not None and (not isinstance(value, str) or not value):
            raise WebhookMalformed(f"data.{name} must be a non-empty string")
    if fields["taskId"] is None and fields["callNodeId"] is None:
        raise WebhookMalformed("data names no operation (taskId or callNodeId)")
    return Named(
        operation_id=fields["taskId"], call_node_id=fields["callNodeId"], status=fields["status"]
    )


class WebhookReceiver:
    """Verifies deliveries and wakes the polls they name; usable behind any HTTP
    framework through :meth:`handle` (headers and body in, status and reason out)."""

    def __init__(
        self,
        executor: Hinted,
        verifier: Verifier | None,
        *,
        clock: Callable[[], float] | None = None,
        servers: Mapping[str, tuple[str, Verifier]] | None = None,
    ) -> None:
        """``verifier``: the keys of ``POST /webhooks`` (None: that path takes nothing).
        ``servers``: a server's name -> (its URL, its own keys), taken at
        ``POST /webhooks/NAME``; a delivery verified there wakes only that server's
        operations."""
        self.executor = executor
        self.verifier = verifier
        self.servers = dict(servers or {})
        self.clock = clock or executor.clock
        self.counts: Counter[str] = Counter()
        """Deliveries by outcome: ``hinted`` or the rejection's type name."""
        self._lock = threading.Lock()  # the id set is shared by every thread that calls

    def handle(
        self, headers: Mapping[str, str], body: bytes, server: str | None = None
    ) -> tuple[int, str]:
        """The HTTP status and a short reason for one delivery (2xx only when verified;
        a verified duplicate is 200 and does nothing). ``server``: the configured
        server whose keys verify it (``/webhooks/NAME``); None: the default keys."""
        answer = self.answer(headers, body, server)
        return answer.status, answer.reason

    def answer(
        self, headers: Mapping[str, str], body: bytes, server: str | None = None
    ) -> WebhookAnswer:
        """:meth:`handle`, with the executor's pending answer for whoever waits on it."""
        verifier, url = self.verifier, None
        if server is not None:
            entry = self.servers.get(server)
            verifier, url = (None, None) if entry is None else (entry[1], entry[0])
        if verifier is None:
            self.counts["no_keys"] += 1
            what = "no server of that name has" if server is not None else "no default"
            return WebhookAnswer(status=404, reason=f"{what} webhook keys here")
        try:
            with self._lock:
                verifier.verify(headers, body, now=self.clock())
            named = read_payload(body)
        except WebhookRejected as rejected:
            self.counts[type(rejected).__name__] += 1
            log.info("webhook refused: %s", rejected)
            return WebhookAnswer(status=rejected.status, reason=str(rejected))
        self.counts["hinted"] += 1
        woken = self.executor.hint(
            operation_id=named.operation_id,
            call_node_id=named.call_node_id,
            status=named.status,
            server=url,
        )
        # 2xx even when it names nothing of ours: the sender is who it says, and a
        # retry would not change that (another worker's ledger may hold the task).
        return WebhookAnswer(
            status=202, reason="verified; taken as a hint to poll sooner", woken=woken
        )

    def asgi_app(self) -> Starlette:
        """A Starlette app serving ``POST /webhooks`` with :meth:`handle`."""
        from starlette.applications import Starlette
        from starlette.requests import Request
        from starlette.responses import PlainTextResponse
        from starlette.routing import Route

        async def receive(request: Request) -> PlainTextResponse:
            declared = request.headers.get("content-length", "")
            if declared.isdigit() and int(declared) > BODY_MAX_BYTES:
                return PlainTextResponse("payload too large\n", status_code=413)
            body = b""
            async for chunk in request.stream():
                body += chunk
                if len(body) > BODY_MAX_BYTES:
                    return PlainTextResponse("payload too large\n", status_code=413)
            server = request.path_params.get("server")
            status, reason = self.handle(dict(request.headers), body, server)
            return PlainTextResponse(reason + "\n", status_code=status)

        return Starlette(
            routes=[
                Route(PATH, receive, methods=["POST"]),
                Route(PATH + "/{server}", receive, methods=["POST"]),
            ]
        )


def listen_socket(host: str, port: int) -> socket.socket:
    """A bound, listening TCP socket, or WebhookPortUnavailable saying why not."""
    try:
        return listening_socket(host, port)
    except OSError as exc:
        raise WebhookPortUnavailable(
            f"the webhook receiver cannot listen on {host}:{port}: {exc.strerror or exc}"
        ) from None


async def serve(receiver: WebhookReceiver, sock: socket.socket) -> None:
    """Serve the receiver on the listening ``sock`` until cancelled."""
    import uvicorn

    class Quiet(uvicorn.Server):
        """Leaves signals to the process it runs in (a worker stops it by cancelling)."""

        @contextlib.contextmanager
        def capture_signals(self) -> Iterator[None]:
            yield

    config = uvicorn.Config(
        receiver.asgi_app(), log_level="warning", lifespan="off", access_log=False,
        timeout_graceful_shutdown=2,
    )  # fmt: skip
    try:
        await Quiet(config).serve(sockets=[sock])
    finally:
        sock.close()


__all__ = [
    "PATH",
    "Hinted",
    "Named",
    "WebhookAnswer",
    "WebhookReceiver",
    "listen_socket",
    "read_payload",
    "serve",
]
