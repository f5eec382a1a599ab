"""Server test fixtures: real servers on 127.0.0.1 (free ports) and raw JSON-RPC clients."""

from __future__ import annotations

import contextlib
import itertools
import json
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest

from longcall.server import LongcallServer, build_reference_server, running_server

MODERN = "2026-07-28"
LEGACY = "2025-11-25"
TASKS_EXTENSION = "io.modelcontextprotocol/tasks"
ELICITATION = {"elicitation": {"form": {}}}
HTTP_TIMEOUT_S = 10.0


@pytest.fixture
def anyio_backend() -> str:
    """Run async tests on asyncio (the anyio pytest plugin)."""
    return "asyncio"


class ManualClock:
    """A wall clock the test moves by hand (ttl/expiry tests without sleeping)."""

    def __init__(self) -> None:
        self.now = time.time()

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


def envelope(*, consent: bool = True, capabilities: dict[str, Any] | None = None) -> dict[str, Any]:
    """The 2026-07-28 per-request ``_meta`` envelope, with or without the tasks extension."""
    caps: dict[str, Any] = dict(capabilities if capabilities is not None else ELICITATION)
    if consent:
        caps.setdefault("extensions", {})[TASKS_EXTENSION] = {}
    return {
        "io.modelcontextprotocol/protocolVersion": MODERN,
        "io.modelcontextprotocol/clientCapabilities": caps,
        "io.modelcontextprotocol/clientInfo": {"name": "longcall-tests", "version": "0"},
    }


class ModernClient:
    """Raw 2026-07-28 JSON-RPC over httpx: sets the envelope and routing headers by default."""

    def __init__(self, http: httpx.AsyncClient, url: str, token: str | None = None) -> None:
        self.http = http
        self.url = url
        self.token = token
        self._ids = itertools.count(1)

    def headers(self, method: str, name: str | None) -> dict[str, str]:
        headers = {
            "accept": "application/json, text/event-stream",
            "mcp-protocol-version": MODERN,
            "mcp-method": method,
        }
        if name is not None:
            headers["mcp-name"] = name
        if self.token is not None:
            headers["authorization"] = f"Bearer {self.token}"
        return headers

    async def post(
        self,
        method: str,
        params: dict[str, Any] | None = None,
        *,
        consent: bool = True,
        meta: dict[str, Any] | None = None,
        headers: dict[str, str] | None = None,
        drop_headers: tuple[str, ...] = (),
    ) -> httpx.Response:
        body_params = dict(params or {})
        body_params["_meta"] = {**envelope(consent=consent), **(meta or {})}
        name = None
        if method == "tools/call":
            name = body_params.get("name")
        elif method.startswith("tasks/"):
            name = body_params.get("taskId")
        all_headers = self.headers(method, name if isinstance(name, str) else None)
        all_headers.update(headers or {})
        for header in drop_headers:
            all_headers.pop(header, None)
        body = {"jsonrpc": "2.0", "id": next(self._ids), "method": method, "params": body_params}
        return await self.http.post(self.url, json=body, headers=all_headers)

    async def result(
        self, method: str, params: dict[str, Any] | None = None, **kw: Any
    ) -> dict[str, Any]:
        response = await self.post(method, params, **kw)
        payload = response.json()
        assert "result" in payload, payload
        return payload["result"]

    async def error(
        self, method: str, params: dict[str, Any] | None = None, **kw: Any
    ) -> dict[str, Any]:
        response = await self.post(method, params, **kw)
        payload = response.json()
        assert "error" in payload, payload
        return {**payload["error"], "httpStatus": response.status_code}

    async def create(self, tool: str, arguments: dict[str, Any], **kw: Any) -> dict[str, Any]:
        result = await self.result("tools/call", {"name": tool, "arguments": arguments}, **kw)
        assert result["resultType"] == "task", result
        return result

    async def get(self, task_id: str) -> dict[str, Any]:
        return await self.result("tasks/get", {"taskId": task_id})

    async def wait_status(
        self, task_id: str, statuses: set[str], *, limit_s: float = 10.0
    ) -> dict[str, Any]:
        """Wait (bounded) for a status in ``statuses`` on a ``subscriptions/listen`` stream."""
        headers = self.headers("subscriptions/listen", None)
        body = {
            "jsonrpc": "2.0",
            "id": next(self._ids),
            "method": "subscriptions/listen",
            "params": {"notifications": {"taskIds": [task_id]}, "_meta": envelope()},
        }
        with anyio.fail_after(limit_s):
            async with self.http.stream("POST", self.url, json=body, headers=headers) as stream:
                async for line in stream.aiter_lines():
                    if not line.startswith("data:"):
                        continue
                    message = json.loads(line[len("data:") :])
                    if message.get("method") != "notifications/tasks":
                        continue
                    if message["params"]["status"] in statuses:
                        return message["params"]
        raise AssertionError(f"stream of {task_id} ended before any of {statuses}")


class LegacyClient:
    """Raw 2025-11-25 JSON-RPC over httpx (stateless: no session id is issued)."""

    def __init__(self, http: httpx.AsyncClient, url: str, token: str | None = None) -> None:
        self.http = http
        self.url = url
        self.token = token
        self._ids = itertools.count(1)

    def headers(self) -> dict[str, str]:
        headers = {"accept": "application/json, text/event-stream", "mcp-protocol-version": LEGACY}
        if self.token is not None:
            headers["authorization"] = f"Bearer {self.token}"
        return headers

    async def post(self, method: str, params: dict[str, Any] | None = None) -> httpx.Response:
        body: dict[str, Any] = {"jsonrpc": "2.0", "id": next(self._ids), "method": method}
        if params is not None:
            body["params"] = params
        return await self.http.post(self.url, json=body, headers=self.headers())

    async def result(self, method: str, params: dict[str, Any] | None = None) -> dict[str, Any]:
        payload = (await self.post(method, params)).json()
        assert "result" in payload, payload
        return payload["result"]

    async def error(self, method: str, params: dict[str, Any] | None = None) -> dict[str, Any]:
        payload = (await self.post(method, params)).json()
        assert "error" in payload, payload
        return payload["error"]

    async def create(
        self, tool: str, arguments: dict[str, Any], ttl: int | None = None
    ) -> dict[str, Any]:
        task = {} if ttl is None else {"ttl": ttl}
        result = await self.result(
            "tools/call", {"name": tool, "arguments": arguments, "task": task}
        )
        return result["task"]

    async def final(self, task_id: str) -> dict[str, Any]:
        """``tasks/result`` as plain JSON (blocks until terminal)."""
        headers = {**self.headers(), "accept": "application/json"}
        body = {
            "jsonrpc": "2.0",
            "id": next(self._ids),
            "method": "tasks/result",
            "params": {"taskId": task_id},
        }
        return (await self.http.post(self.url, json=body, headers=headers)).json()


@pytest.fixture
def store_path(tmp_path: Path) -> str:
    """A fresh SQLite task-store file."""
    return str(tmp_path / "tasks.db")


@pytest.fixture
def serve() -> Callable[[LongcallServer], contextlib.AbstractAsyncContextManager[str]]:
    """Serve a given server on a free port for the duration of an ``async with``."""
    return running_server


@pytest.fixture
async def http() -> AsyncIterator[httpx.AsyncClient]:
    """An httpx client with bounded timeouts."""
    async with httpx.AsyncClient(timeout=HTTP_TIMEOUT_S) as client:
        yield client


@pytest.fixture
async def reference_url(store_path: str) -> AsyncIterator[str]:
    """The reference server (five example tools) on a free port."""
    async with running_server(build_reference_server(store=store_path)) as url:
        yield url


@pytest.fixture
def modern(http: httpx.AsyncClient, reference_url: str) -> ModernClient:
    """A 2026-07-28 client of the reference server (anonymous)."""
    return ModernClient(http, reference_url)


@pytest.fixture
def legacy(http: httpx.AsyncClient, reference_url: str) -> LegacyClient:
    """A 2025-11-25 client of the reference server (anonymous)."""
    return LegacyClient(http, reference_url)
