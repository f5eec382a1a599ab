"""Server test fixtures: real servers on 127.0.0.1 (free ports) and raw JSON-RPC clients."""

from __future__ import annotations

import contextlib
import functools
import itertools
import json
import os
import re
import secrets
import subprocess
import time
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest
from tests.bounds import LOADED_MACHINE_S

from longcall.server import LongcallServer, build_reference_server, running_server

MODERN = "2026-07-28"
LEGACY = "2025-11-25"
TASKS_EXTENSION = "io.modelcontextprotocol/tasks"
SUBSCRIPTION_ID = "io.modelcontextprotocol/subscriptionId"
ELICITATION = {"elicitation": {"form": {}}}
HTTP_TIMEOUT_S = 60.0
STARTUP_LIMIT_S = LOADED_MACHINE_S
POLL_STEP_S = 0.05


def start_logged(argv: list[str], log: Path, *, stream: str) -> subprocess.Popen[bytes]:
    """A child process writing its ``stream`` ("stdout" or "stderr") to ``log``."""
    with log.open("wb") as out:
        streams = {"stdout": subprocess.DEVNULL, "stderr": subprocess.DEVNULL, stream: out}
        return subprocess.Popen(argv, env={**os.environ, "PYTHONUNBUFFERED": "1"}, **streams)


async def announced(process: subprocess.Popen[bytes], log: Path, pattern: str) -> str:
    """The first group of ``pattern`` once the child has written it to ``log`` (a
    bounded poll of another process's output: it gives no event to wait on)."""
    deadline = time.monotonic() + STARTUP_LIMIT_S
    while True:
        text = await anyio.Path(log).read_text()
        found = re.search(pattern, text)
        if found:
            return found.group(1)
        assert process.poll() is None, text
        assert time.monotonic() < deadline, f"nothing matching {pattern!r} announced"
        await anyio.sleep(POLL_STEP_S)


async def wait_ready(process: subprocess.Popen[bytes], client: ModernClient) -> None:
    """Until the child server answers MCP (bounded; fails if it exits first)."""
    deadline = time.monotonic() + STARTUP_LIMIT_S
    while True:
        try:
            await client.result("server/discover")
            return
        except httpx.TransportError:
            assert process.poll() is None, "server exited"
            assert time.monotonic() < deadline, "server did not start"
            await anyio.sleep(POLL_STEP_S)


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


def mcp_post_scope(*extra_headers: tuple[bytes, bytes]) -> dict[str, Any]:
    """A ``POST /mcp`` scope as uvicorn hands it to the app (JSON in, JSON or SSE out),
    for tests that drive the ASGI app without a socket."""
    return {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "POST",
        "scheme": "http",
        "path": "/mcp",
        "raw_path": b"/mcp",
        "root_path": "",
        "query_string": b"",
        "headers": [
            (b"host", b"127.0.0.1"),
            (b"content-type", b"application/json"),
            (b"accept", b"application/json, text/event-stream"),
            *extra_headers,
        ],
        "client": ("127.0.0.1", 40000),
        "server": ("127.0.0.1", 8765),
    }


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
        self, task_id: str, statuses: set[str], *, limit_s: float = LOADED_MACHINE_S
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
                    if str(message.get("method")).startswith("notifications/"):
                        # SEP-2575: every frame, the acknowledgement too, names the subscription.
                        tag = message["params"]["_meta"][SUBSCRIPTION_ID]
                        assert tag == body["id"], message
                    if message.get("method") != "notifications/tasks":
                        continue
                    params = dict(message["params"])
                    assert params.pop("_meta") == {SUBSCRIPTION_ID: body["id"]}, message
                    if params["status"] in statuses:
                        return params
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


DEFAULT_PG_DSN = "postgresql://postgres@127.0.0.1:5432/test"
PG_CONNECT_TIMEOUT_S = 3


def pg_dsn() -> str:
    """The PostgreSQL server the tests use."""
    return os.environ.get("LONGCALL_PG_DSN", DEFAULT_PG_DSN)


@functools.cache
def _pg_unreachable_reason() -> str | None:
    import psycopg

    try:
        with psycopg.connect(pg_dsn(), connect_timeout=PG_CONNECT_TIMEOUT_S) as conn:
            conn.execute("SELECT 1")
    except psycopg.Error as exc:
        return f"no PostgreSQL at LONGCALL_PG_DSN={pg_dsn()!r}: {exc}".strip()
    return None


def require_pg() -> str:
    """The DSN, or skip (fail when LONGCALL_REQUIRE_PG=1) if no server answers."""
    reason = _pg_unreachable_reason()
    if reason is not None:
        if os.environ.get("LONGCALL_REQUIRE_PG") == "1":
            pytest.fail(f"LONGCALL_REQUIRE_PG=1 but {reason}", pytrace=False)
        pytest.skip(reason)
    return pg_dsn()


@contextlib.contextmanager
def pg_schema_url() -> Iterator[str]:
    """A task-store URL on a fresh PostgreSQL schema, dropped on exit."""
    import psycopg
    from psycopg import sql

    dsn = require_pg()
    schema = f"lc_tasks_{secrets.token_hex(6)}"
    try:
        yield f"{dsn}?schema={schema}"
    finally:
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema)))


@pytest.fixture
def pg_store_url() -> Iterator[str]:
    """A PostgreSQL task-store URL of this test alone."""
    with pg_schema_url() as url:
        yield url


@pytest.fixture(params=["sqlite", "postgres"])
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """A fresh task-store URL on each backend (the one contract holds on both)."""
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'contract.db'}"
    else:
        with pg_schema_url() as url:
            yield url
