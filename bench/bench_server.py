"""Tool-side throughput: tasks created and driven to ``completed`` per second over HTTP.

Every server runs in its own process on 127.0.0.1 and serves the same trivial
required-task tool ``noop``; one raw 2026-07-28 client (httpx, the same headers, the
same poll pause, the same concurrency) drives them from this process. Each server
process gets a session of its own: Linux with autogroup scheduling shares the CPU
between sessions first, so a server in the client's session shared the client's share
(a deployed server does not), and on a loaded machine the client's own CPU then set
the pace of every server alike.

0. The SQLite store alone, no HTTP: group commit and a reader thread against one commit
   per write with every read in the writer's queue (the store before them), alternating
   rounds, ``synchronous=FULL``.
1. Ours vs the peer, alternating short rounds: ``longcall.server`` on a SQLite file
   (``synchronous=FULL``: every commit fsynced) against ``fastmcp`` + ``fastmcp-tasks``
   on ``memory://`` (nothing durable). The peer is tuned fairly: its worker's pickup
   interval (``minimum_check_interval``, 50 ms by default) is set to 1 ms — as low as
   ours, where a task starts in the process that created it with no pickup poll at all —
   and its worker concurrency to the client's, so it never queues work ours would run.
   During each side's round the other server process is paused (SIGSTOP): a worker
   polling every millisecond is not idle, and would take CPU from the side being
   measured. Target: ours / peer >= 2.0 while durable. Each server's CPU per task is
   printed too: on a machine other work loads, it is steadier than tasks/s.
2. Several processes on one PostgreSQL store (D1): one ``longcall.server`` process, then
   three on a fresh schema behind a round-robin of their URLs, each task leased to the
   process that created it. Reported as tasks/s and the three/one ratio; on a machine
   with fewer cores than processes the ratio shows the cost of sharing, not scale-out.
   Skipped (said so) when no PostgreSQL answers at ``LONGCALL_PG_DSN``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import itertools
import os
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx

CONCURRENCY = 16
TARGET = 2.0
"""Ours / the peer, while ours is durable and the peer keeps nothing."""
PEER_PICKUP_MS = 1
PG_PROCESSES = 3
DEFAULT_PG_DSN = "postgresql://postgres@127.0.0.1:5432/test"
RUN_S = 8.0
ROUNDS = 4
WARMUP_TASKS = 20
POLL_PAUSE_S = 0.005
STARTUP_LIMIT_S = 90.0
TASK_LIMIT_S = 30.0
REPO_ROOT = Path(__file__).resolve().parents[1]
ENVELOPE = {
    "io.modelcontextprotocol/protocolVersion": "2026-07-28",
    "io.modelcontextprotocol/clientCapabilities": {
        "extensions": {"io.modelcontextprotocol/tasks": {}}
    },
    "io.modelcontextprotocol/clientInfo": {"name": "bench", "version": "0"},
}


# ---- the two servers (run in child processes) -------------------------------------------------


def serve_ours(port: int, store: str) -> None:
    """Our server with the ``noop`` tool on a durable store (a SQLite path or a URL)."""
    from longcall.server import LongcallServer

    server = LongcallServer(store=store if "://" in store else f"sqlite:///{store}")

    @server.tool(task="required", poll_interval_ms=50)
    async def noop() -> dict[str, Any]:
        return {"ok": True}

    asyncio.run(server.serve(host="127.0.0.1", port=port))


def serve_peer(port: int) -> None:
    """fastmcp + fastmcp-tasks (memory://), the same ``noop`` tool, the same kind of socket."""
    from datetime import timedelta

    import uvicorn
    from fastmcp import FastMCP
    from fastmcp.utilities.tasks import TaskConfig
    from fastmcp_tasks import TasksExtension

    from longcall.runtime.listen import listening_socket

    mcp = FastMCP("peer")
    # Fair tuning: pick up work as fast as ours (1 ms, not 50 ms) and run as many at once
    # as the client sends.
    mcp.add_extension(
        TasksExtension(
            url="memory://",
            minimum_check_interval=timedelta(milliseconds=PEER_PICKUP_MS),
            concurrency=CONCURRENCY,
        )
    )

    @mcp.tool(task=TaskConfig(mode="required", poll_interval=timedelta(milliseconds=50)))
    async def noop() -> dict[str, Any]:
        return {"ok": True}

    config = uvicorn.Config(mcp.http_app(), log_level="warning")
    with listening_socket("127.0.0.1", port) as sock:
        asyncio.run(uvicorn.Server(config).serve(sockets=[sock]))


# ---- the shared client -------------------------------------------------------------------------


class Driver:
    """Creates ``noop`` tasks and polls each to ``completed`` (2026-07-28 wire, raw JSON-RPC).

    With several URLs (servers on one store) each task goes to the next URL in turn and is
    polled there."""

    def __init__(self, http: httpx.AsyncClient, url: str | list[str]) -> None:
        self.http = http
        self.urls = [url] if isinstance(url, str) else list(url)
        self.url = self.urls[0]
        self.ids = itertools.count(1)
        self._turn = itertools.cycle(self.urls)

    async def call(
        self, method: str, params: dict[str, Any], name: str, url: str | None = None
    ) -> dict[str, Any]:
        headers = {
            "accept": "application/json, text/event-stream",
            "mcp-protocol-version": "2026-07-28",
            "mcp-method": method,
            "mcp-name": name,
        }
        body = {
            "jsonrpc": "2.0",
            "id": next(self.ids),
            "method": method,
            "params": {**params, "_meta": ENVELOPE},
        }
        response = await self.http.post(url or self.url, json=body, headers=headers)
        payload = response.json()
        if "result" not in payload:
            raise RuntimeError(f"{method} failed: {payload}")
        return dict(payload["result"])

    async def one_task(self) -> None:
        url = next(self._turn)
        created = await self.call("tools/call", {"name": "noop", "arguments": {}}, "noop", url)
        task_id = created["taskId"]
        deadline = time.monotonic() + TASK_LIMIT_S
        while True:
            task = await self.call("tasks/get", {"taskId": task_id}, task_id, url)
            if task["status"] == "completed":
                return
            if task["status"] != "working" or time.monotonic() > deadline:
                raise RuntimeError(f"task {task_id} ended {task['status']}")
            await asyncio.sleep(POLL_PAUSE_S)

    async def wait_ready(self, process: subprocess.Popen[bytes], url: str | None = None) -> None:
        deadline = time.monotonic() + STARTUP_LIMIT_S
        while True:
            try:
                body = {"jsonrpc": "2.0", "id": 0, "method": "ping"}
                await self.http.post(url or self.url, json=body)
                return
            except httpx.TransportError:
                if process.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError("benchmark server did not start") from None
                await asyncio.sleep(0.05)

    async def warm_up(self) -> None:
        for _ in range(WARMUP_TASKS):
            await self.one_task()

    async def completed_within(self, seconds: float) -> tuple[int, float]:
        """(tasks completed, elapsed s) with CONCURRENCY clients for ``seconds``."""
        done = 0
        stop_at = time.perf_counter() + seconds

        async def worker() -> None:
            nonlocal done
            while time.perf_counter() < stop_at:
                await self.one_task()
                done += 1

        started = time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(CONCURRENCY)))
        return done, time.perf_counter() - started


def free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def start_server(arguments: list[str]) -> tuple[int, subprocess.Popen[bytes]]:
    """One benchmark server in a child process on a free port."""
    port = free_port()
    path = os.pathsep.join([str(REPO_ROOT), os.environ.get("PYTHONPATH", "")])
    process = subprocess.Popen(
        [sys.executable, "-m", "bench.bench_server", *arguments, "--port", str(port)],
        cwd=REPO_ROOT,
        env={**os.environ, "PYTHONPATH": path},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    return port, process


def stop_server(process: subprocess.Popen[bytes]) -> None:
    """Terminate a benchmark server (kill it if it lingers)."""
    process.terminate()
    try:
        process.wait(timeout=10)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait(timeout=10)


async def compare(
    servers: dict[str, tuple[int, subprocess.Popen[bytes]]],
    cpu_per_task_s: dict[str, float] | None = None,
) -> dict[str, float]:
    """Alternate short rounds between the servers (same client) so load drift hits both
    alike; tasks/s of each. ``cpu_per_task_s``, when given, is filled with each server
    process's CPU seconds per task over the measured rounds (Linux): on a machine other
    work loads, what a server spends per task is steadier than how many it completes."""
    limits = httpx.Limits(
        max_connections=CONCURRENCY * 2, max_keepalive_connections=CONCURRENCY * 2
    )
    totals = {name: [0, 0.0] for name in servers}
    async with httpx.AsyncClient(timeout=TASK_LIMIT_S, limits=limits) as http:
        drivers = {
            name: Driver(http, f"http://127.0.0.1:{port}/mcp")
            for name, (port, _) in servers.items()
        }
        for name, driver in drivers.items():
            await driver.wait_ready(servers[name][1])
            await driver.warm_up()
        cpu_before = {name: process_cpu_s(process) for name, (_, process) in servers.items()}
        for _ in range(ROUNDS):
            for name, driver in drivers.items():
                with only_running(servers, name):
                    done, elapsed = await driver.completed_within(RUN_S / ROUNDS)
                totals[name][0] += done
                totals[name][1] += elapsed
    if cpu_per_task_s is not None:
        for name, (_, process) in servers.items():
            before, after, done = cpu_before[name], process_cpu_s(process), totals[name][0]
            if before is not None and after is not None and done:
                cpu_per_task_s[name] = (after - before) / done
    return {name: done / elapsed for name, (done, elapsed) in totals.items()}


@contextlib.contextmanager
def only_running(
    servers: dict[str, tuple[int, subprocess.Popen[bytes]]], name: str
) -> Iterator[None]:
    """Every server but ``name`` paused (SIGSTOP) for a round, resumed after it. A server
    that is not being measured is not idle: a task queue polling every millisecond takes
    CPU from the one that is, on a machine with few cores. Each round has no request in
    flight at its end, so nothing is paused mid-request."""
    paused = [process for other, (_, process) in servers.items() if other != name]
    for process in paused:
        process.send_signal(signal.SIGSTOP)
    try:
        yield
    finally:
        for process in paused:
            process.send_signal(signal.SIGCONT)


def cpu_note(cpu_per_task_s: dict[str, float], name: str) -> str:
    """ ", server CPU N ms/task" for a server whose CPU was measured (else nothing)."""
    if name not in cpu_per_task_s:
        return ""
    return f", server CPU {cpu_per_task_s[name] * 1000:5.2f} ms/task"


def process_cpu_s(process: subprocess.Popen[bytes]) -> float | None:
    """CPU seconds (user and system) a child process has used so far; None where
    ``/proc`` does not say (not Linux)."""
    try:
        with open(f"/proc/{process.pid}/stat") as stat:
            fields = stat.read().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def pg_rate(urls: list[str], processes: list[subprocess.Popen[bytes]]) -> float:
    """Tasks/s through ``urls`` (servers sharing one PostgreSQL store), same client setup."""
    limits = httpx.Limits(
        max_connections=CONCURRENCY * 2, max_keepalive_connections=CONCURRENCY * 2
    )
    async with httpx.AsyncClient(timeout=TASK_LIMIT_S, limits=limits) as http:
        driver = Driver(http, urls)
        for url, process in zip(urls, processes, strict=True):
            await driver.wait_ready(process, url)
        await driver.warm_up()
        done, elapsed = await driver.completed_within(RUN_S)
    return done / elapsed


def pg_unreachable(dsn: str) -> str | None:
    """Why PostgreSQL cannot be used here (``None`` when it can)."""
    try:
        import psycopg

        with psycopg.connect(dsn, connect_timeout=3) as conn:
            conn.execute("SELECT 1")
    except Exception as exc:
        return str(exc).strip() or type(exc).__name__
    return None


def drop_schema(dsn: str, schema: str) -> None:
    import psycopg
    from psycopg import sql

    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema)))


def measure_postgres(count: int) -> float:
    """Tasks/s with ``count`` server processes on a fresh PostgreSQL schema."""
    import secrets

    dsn = os.environ.get("LONGCALL_PG_DSN", DEFAULT_PG_DSN)
    schema = f"lc_bench_{secrets.token_hex(4)}"
    store = f"{dsn}?schema={schema}"
    servers = [start_server(["ours", "--store", store]) for _ in range(count)]
    try:
        urls = [f"http://127.0.0.1:{port}/mcp" for port, _ in servers]
        return asyncio.run(pg_rate(urls, [process for _, process in servers]))
    finally:
        for _, process in servers:
            stop_server(process)
        drop_schema(dsn, schema)


def run() -> None:
    """The store alone, ours vs the peer, then one vs three processes on PostgreSQL."""
    run_store()
    run_versus_peer()
    run_postgres()


STORE_ROUNDS = 3
STORE_ROUND_S = 2.0


async def store_rate(store: Any, seconds: float) -> tuple[int, float]:
    """(tasks, elapsed s): CONCURRENCY loops of create, get, complete, get on ``store``."""
    from longcall.server.model import NewTask, ProtocolVersion
    from longcall.server.states import Cause

    task: dict[str, Any] = {
        "principal": "bench",
        "tool_name": "noop",
        "arguments": {},
        "arguments_digest": "-",
        "protocol": ProtocolVersion.MODERN,
        "submission_key": None,
        "ttl_ms": None,
        "poll_interval_ms": 50,
    }
    done = 0
    stop_at = time.perf_counter() + seconds

    async def loop() -> None:
        nonlocal done
        while time.perf_counter() < stop_at:
            now = time.time()
            new = NewTask(task_id=uuid.uuid4().hex, created_at=now, **task)
            record, _ = await store.create(new, owner="bench", lease_until=now + 60)
            await store.get(record.task_id)
            await store.transition(record.task_id, Cause.TOOL_RETURNED, now=time.time())
            await store.get(record.task_id)
            done += 1

    started = time.perf_counter()
    await asyncio.gather(*(loop() for _ in range(CONCURRENCY)))
    return done, time.perf_counter() - started


def run_store() -> None:
    """The SQLite store alone (no HTTP): group commit and the reader thread against one
    commit per write with reads in the writer's queue (the store before them), in
    alternating rounds, each on a file of its own with ``synchronous=FULL``."""
    from longcall.server.store import SqliteTaskStore

    class OneCommitPerWrite(SqliteTaskStore):
        group_commit = False
        readers = 0

    kinds = {"grouped": SqliteTaskStore, "one per write": OneCommitPerWrite}
    totals = {name: [0, 0.0] for name in kinds}
    with tempfile.TemporaryDirectory() as directory:
        stores = {
            name: kind(Path(directory) / f"{index}.db")
            for index, (name, kind) in enumerate(kinds.items())
        }
        try:
            for _ in range(STORE_ROUNDS):
                for name, store in stores.items():
                    done, elapsed = asyncio.run(store_rate(store, STORE_ROUND_S))
                    totals[name][0] += done
                    totals[name][1] += elapsed
        finally:
            for store in stores.values():
                store.close()
    rates = {name: done / elapsed for name, (done, elapsed) in totals.items()}
    grouped, single = rates["grouped"], rates["one per write"]
    print(f"SQLite store alone, group commit and a reader thread: {grouped:8.1f} tasks/s")
    print(f"SQLite store alone, one commit per write, one thread: {single:8.1f} tasks/s")
    print(
        f"ratio grouped / one per write: {grouped / single:.2f}x ({CONCURRENCY} concurrent"
        " create, get, complete, get; synchronous=FULL)"
    )


def run_postgres() -> None:
    """One and three processes on one PostgreSQL store."""
    dsn = os.environ.get("LONGCALL_PG_DSN", DEFAULT_PG_DSN)
    reason = pg_unreachable(dsn)
    if reason is not None:
        print(f"PostgreSQL store: not measured (no PostgreSQL at LONGCALL_PG_DSN: {reason})")
        return
    # The first start migrates a fresh schema; both measurements get one of their own.
    one = measure_postgres(1)
    several = measure_postgres(PG_PROCESSES)
    print(f"longcall.server, 1 process on PostgreSQL:  {one:8.1f} tasks/s")
    print(f"longcall.server, {PG_PROCESSES} processes on PostgreSQL: {several:8.1f} tasks/s")
    cores = os.cpu_count() or 1
    print(
        f"ratio {PG_PROCESSES} / 1: {several / one:.2f}x ({CONCURRENCY} clients round-robin,"
        f" {RUN_S:g} s each, {cores} cores here)"
    )


def run_versus_peer() -> None:
    """Measure ours and the peer with the same client and print both figures and the ratio."""
    with tempfile.TemporaryDirectory() as directory:
        store = str(Path(directory) / "bench-tasks.db")
        servers = {"ours": start_server(["ours", "--store", store]), "peer": start_server(["peer"])}
        cpu: dict[str, float] = {}
        try:
            rates = asyncio.run(compare(servers, cpu))
        finally:
            for _, process in servers.values():
                stop_server(process)
    ours, peer = rates["ours"], rates["peer"]
    ours_cpu = cpu_note(cpu, "ours")
    print(f"longcall.server (SQLite file, synchronous=FULL): {ours:8.1f} tasks/s{ours_cpu}")
    print(
        f"fastmcp + fastmcp-tasks (memory://, pickup {PEER_PICKUP_MS} ms): {peer:8.1f} tasks/s"
        f"{cpu_note(cpu, 'peer')}"
    )
    setup = f"{CONCURRENCY} clients, {ROUNDS} alternating rounds, {RUN_S:g} s per server"
    verdict = "meets" if ours / peer >= TARGET else "misses"
    print(f"ratio ours / peer: {ours / peer:.2f}x ({verdict} the >= {TARGET:g}x target; {setup})")


def main() -> None:
    """Child-process entry: serve one side of the benchmark."""
    parser = argparse.ArgumentParser()
    parser.add_argument("side", choices=["ours", "peer"])
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--store", default=None)
    args = parser.parse_args()
    if args.side == "ours":
        serve_ours(args.port, args.store)
    else:
        serve_peer(args.port)


if __name__ == "__main__":
    main()
