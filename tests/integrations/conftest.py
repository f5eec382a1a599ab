"""Fixtures of the FastMCP integration tests: the test app as a child process on a real
store (SQLite file or a fresh PostgreSQL schema), and a raw 2026-07-28 JSON-RPC client.

These tests run in both FastMCP venvs (4.1.x in ``.venv``, the newest 4.2.x in
``.venv-fastmcp-latest``); those needing fastmcp-tasks (its client, the parity peer)
skip where it cannot be installed (4.2.x).
"""

from __future__ import annotations

import contextlib
import functools
import itertools
import os
import secrets
import signal
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest
from tests.bounds import LOADED_MACHINE_S

pytest.importorskip("fastmcp")

APP = Path(__file__).with_name("fastmcp_app.py")
MODERN = "2026-07-28"
TASKS_EXTENSION = "io.modelcontextprotocol/tasks"
SUBMISSION_KEY = "dev.longcall/submissionKey"
STARTUP_LIMIT_S = LOADED_MACHINE_S
WAIT_LIMIT_S = LOADED_MACHINE_S
POLL_STEP_S = 0.05
DEFAULT_PG_DSN = "postgresql://postgres@127.0.0.1:5432/test"


@pytest.fixture
def anyio_backend() -> str:
    """Async tests run on asyncio."""
    return "asyncio"


def envelope(*, consent: bool = True, elicitation: bool = True) -> dict[str, Any]:
    """The 2026-07-28 per-request ``_meta`` envelope."""
    capabilities: dict[str, Any] = {"elicitation": {"form": {}}} if elicitation else {}
    if consent:
        capabilities["extensions"] = {TASKS_EXTENSION: {}}
    return {
        "io.modelcontextprotocol/protocolVersion": MODERN,
        "io.modelcontextprotocol/clientCapabilities": capabilities,
        "io.modelcontextprotocol/clientInfo": {"name": "longcall-tests", "version": "0"},
    }


class RawClient:
    """Raw 2026-07-28 JSON-RPC over httpx, with the routing headers a client sends."""

    def __init__(self, http: httpx.AsyncClient, url: str, token: str | None = None) -> None:
        self.http = http
        self.url = url
        self.token = token
        self._ids = itertools.count(1)

    async def post(
        self,
        method: str,
        params: dict[str, Any] | None = None,
        *,
        consent: bool = True,
        elicitation: bool = True,
        meta: dict[str, Any] | None = None,
        name: str | None = None,
    ) -> httpx.Response:
        body_params = dict(params or {})
        body_params["_meta"] = {
            **envelope(consent=consent, elicitation=elicitation),
            **(meta or {}),
        }
        headers = {
            "accept": "application/json, text/event-stream",
            "mcp-protocol-version": MODERN,
            "mcp-method": method,
        }
        routed = name or body_params.get("name") or body_params.get("taskId")
        if routed is not None and method in (
            "tools/call",
            "tasks/get",
            "tasks/update",
            "tasks/cancel",
        ):
            headers["mcp-name"] = str(routed)
        if self.token is not None:
            headers["authorization"] = f"Bearer {self.token}"
        body = {"jsonrpc": "2.0", "id": next(self._ids), "method": method, "params": body_params}
        return await self.http.post(self.url, json=body, headers=headers)

    async def result(self, method: str, params: dict[str, Any] | None = None, **kw: Any) -> Any:
        payload = (await self.post(method, params, **kw)).json()
        assert "result" in payload, payload
        return payload["result"]

    async def error(self, method: str, params: dict[str, Any] | None = None, **kw: Any) -> Any:
        payload = (await self.post(method, params, **kw)).json()
        assert "error" in payload, payload
        return payload["error"]

    async def create(self, tool: str, arguments: dict[str, Any], **kw: Any) -> dict[str, Any]:
        result = await self.result("tools/call", {"name": tool, "arguments": arguments}, **kw)
        assert result["resultType"] == "task", result
        return dict(result)

    async def get(self, task_id: str) -> dict[str, Any]:
        return dict(await self.result("tasks/get", {"taskId": task_id}))

    async def wait_for(
        self, task_id: str, statuses: set[str], *, limit_s: float = WAIT_LIMIT_S
    ) -> dict[str, Any]:
        """Poll ``tasks/get`` (as a client does, at the task's pace) until a status."""
        with anyio.fail_after(limit_s):
            while True:
                task = await self.get(task_id)
                if task["status"] in statuses:
                    return task
                await anyio.sleep(POLL_STEP_S)


class App:
    """The test app as a child process (``fastmcp_app.py``) on ``store``."""

    def __init__(self, store: str, workdir: Path, *flags: str) -> None:
        self.store = store
        self.flags = flags
        self.workdir = workdir
        self.process: subprocess.Popen[bytes] | None = None
        self.url = ""
        self._starts = itertools.count()

    @property
    def backend(self) -> str:
        """The task backend the app runs on: ``longcall`` unless ``--backend`` says."""
        flags = list(self.flags)
        return flags[flags.index("--backend") + 1] if "--backend" in flags else "longcall"

    async def start_on(self, url: str) -> App:
        """Start again on the port of ``url`` (a caller names the server by its URL)."""
        return await self.start(port=int(url.rsplit(":", 1)[1].split("/")[0]))

    async def start(self, port: int = 0) -> App:
        index = next(self._starts)
        port_file = self.workdir / f"port-{secrets.token_hex(4)}"
        log = (self.workdir / f"app-{index}-{secrets.token_hex(2)}.log").open("wb")
        argv = [sys.executable, str(APP), self.store, str(port_file), *self.flags]
        if port:
            argv += ["--port", str(port)]
        env = {**os.environ, "PYTHONUNBUFFERED": "1"}
        self.process = subprocess.Popen(  # noqa: ASYNC220 (returns at once)
            argv, stdout=log, stderr=subprocess.STDOUT, env=env
        )
        log.close()
        # A bounded poll of another process's announcement: it gives no event to wait on.
        deadline = time.monotonic() + STARTUP_LIMIT_S
        while not port_file.exists():
            assert self.process.poll() is None, f"app exited: {self.log_text()}"
            assert time.monotonic() < deadline, f"app did not start: {self.log_text()}"
            await anyio.sleep(POLL_STEP_S)
        self.url = f"http://127.0.0.1:{port_file.read_text()}/mcp"
        return self

    def start_blocking(self) -> App:
        """``start`` for a module-scoped fixture (no event loop there)."""
        return anyio.run(self.start)

    def log_text(self) -> str:
        return "\n".join(
            p.read_text(errors="replace") for p in sorted(self.workdir.glob("app-*.log"))
        )

    def stop(self) -> None:
        """A graceful stop (SIGTERM): the lifespan ends and hands leases back."""
        process = self.process
        if process is not None and process.poll() is None:
            process.send_signal(signal.SIGTERM)
            try:
                process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(timeout=10)
        self.process = None

    def kill(self) -> None:
        """SIGKILL: nothing runs after it; the leases lapse on their own."""
        process = self.process
        if process is not None and process.poll() is None:
            process.kill()
            process.wait(timeout=10)
        self.process = None


@pytest.fixture
async def http() -> AsyncIterator[httpx.AsyncClient]:
    """One HTTP client for a test."""
    async with httpx.AsyncClient(timeout=20.0) as client:
        yield client


@pytest.fixture(scope="module")
def shared_app(tmp_path_factory: pytest.TempPathFactory) -> Iterator[App]:
    """One app on its own SQLite store for a module's tests that need no restart."""
    workdir = tmp_path_factory.mktemp("shared-app")
    app = App(f"sqlite:///{workdir / 'tasks.db'}", workdir).start_blocking()
    yield app
    app.stop()


@pytest.fixture
def sqlite_url(tmp_path: Path) -> str:
    """A fresh SQLite task store of this test alone."""
    return f"sqlite:///{tmp_path / 'tasks.db'}"


@contextlib.asynccontextmanager
async def running(store: str, workdir: Path, *flags: str) -> AsyncIterator[App]:
    """The app started on ``store``, stopped on exit."""
    app = App(store, workdir, *flags)
    try:
        yield await app.start()
    finally:
        app.stop()


def pg_dsn() -> str:
    """The PostgreSQL server the tests use."""
    return os.environ.get("LONGCALL_PG_DSN", DEFAULT_PG_DSN)


@functools.cache
def _pg_unreachable_reason() -> str | None:
    import psycopg

    try:
        with psycopg.connect(pg_dsn(), connect_timeout=3) as conn:
            conn.execute("SELECT 1")
    except psycopg.Error as exc:
        return f"no PostgreSQL at LONGCALL_PG_DSN={pg_dsn()!r}: {exc}".strip()
    return None


@pytest.fixture
def pg_store_url() -> Iterator[str]:
    """A task-store URL on a fresh PostgreSQL schema, dropped on exit (skip, or fail when
    LONGCALL_REQUIRE_PG=1, without a server)."""
    import psycopg
    from psycopg import sql

    reason = _pg_unreachable_reason()
    if reason is not None:
        if os.environ.get("LONGCALL_REQUIRE_PG") == "1":
            pytest.fail(f"LONGCALL_REQUIRE_PG=1 but {reason}", pytrace=False)
        pytest.skip(reason)
    dsn = pg_dsn()
    schema = f"lc_fastmcp_{secrets.token_hex(6)}"
    try:
        yield f"{dsn}?schema={schema}"
    finally:
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema)))
