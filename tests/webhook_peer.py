"""A webhook receiver the tests control, served over real HTTP on 127.0.0.1.

Each request is recorded (headers, body, arrival on the loop clock) and answered by the
test's ``answer`` function; ``wait_for`` waits on the arrival of requests, never a
fixed time.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
from collections.abc import Callable
from dataclasses import dataclass

import uvicorn
from tests.bounds import LOADED_MACHINE_S

from longcall.runtime.listen import listening_socket

Answer = Callable[[int, dict[str, str], bytes], tuple[int, dict[str, str]]]
"""(request number from 1, headers, body) -> (HTTP status, headers)."""


@dataclass(frozen=True)
class Received:
    headers: dict[str, str]
    body: bytes
    at: float
    status: int

    @property
    def msg_id(self) -> str:
        return self.headers["webhook-id"]


def no_content(_n: int, _headers: dict[str, str], _body: bytes) -> tuple[int, dict[str, str]]:
    return 204, {}


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class HookReceiver:
    """A programmable receiver: ``async with HookReceiver() as hooks: hooks.url``."""

    def __init__(self, answer: Answer = no_content, *, port: int = 0, path: str = "/hook") -> None:
        self.answer = answer
        self.port = port
        self.path = path
        self.requests: list[Received] = []
        self._changed = asyncio.Condition()
        self._server: uvicorn.Server | None = None
        self._serving: asyncio.Task[None] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}{self.path}"

    async def __call__(self, scope: dict, receive: Callable, send: Callable) -> None:  # type: ignore[type-arg]
        if scope["type"] != "http":
            return
        body = b""
        while True:
            message = await receive()
            body += message.get("body", b"")
            if not message.get("more_body"):
                break
        headers = {k.decode("latin-1"): v.decode("latin-1") for k, v in scope["headers"]}
        status, extra = self.answer(len(self.requests) + 1, headers, body)
        self.requests.append(
            Received(
                headers=headers, body=body, at=asyncio.get_running_loop().time(), status=status
            )
        )
        await send(
            {
                "type": "http.response.start",
                "status": status,
                "headers": [(k.encode(), v.encode()) for k, v in extra.items()],
            }
        )
        await send({"type": "http.response.body", "body": b""})
        async with self._changed:
            self._changed.notify_all()

    async def start(self) -> None:
        sock = listening_socket("127.0.0.1", self.port)
        self.port = sock.getsockname()[1]
        config = uvicorn.Config(self, log_level="warning", lifespan="off", access_log=False)
        self._server = uvicorn.Server(config)
        self._serving = asyncio.get_running_loop().create_task(self._server.serve(sockets=[sock]))

    async def stop(self) -> None:
        if self._server is not None and self._serving is not None:
            self._server.should_exit = True
            with contextlib.suppress(asyncio.CancelledError):
                await self._serving
            self._server = self._serving = None

    async def __aenter__(self) -> HookReceiver:
        await self.start()
        return self

    async def __aexit__(self, *_: object) -> None:
        await self.stop()

    async def wait_for(
        self, predicate: Callable[[list[Received]], bool], limit_s: float = LOADED_MACHINE_S
    ) -> list[Received]:
        """Until ``predicate(requests)`` holds (bounded: a guard, not a duration)."""
        async with asyncio.timeout(limit_s), self._changed:
            await self._changed.wait_for(lambda: predicate(self.requests))
        return list(self.requests)

    def accepted(self) -> list[Received]:
        return [r for r in self.requests if 200 <= r.status < 300]
