"""Tool-side throughput: tasks created and driven to ``completed`` per second over HTTP.

Every server runs in its own process on 127.0.0.1 and serves the same trivial
required-task tool ``noop``; the same load generator drives each: a process of its own
per server (``load`` below), raw 2026-07-28 JSON-RPC over keep-alive HTTP/1.1
connections (asyncio streams, the same headers, the same poll pause, the same
concurrency). Each server process and each generator gets a session of its own: Linux
with autogroup scheduling shares the CPU between sessions first, so a server in the
client's session shared the client's share (a deployed server does not).

Why a generator this cheap: the client used to be httpx in this process, which spent
3–6 ms of CPU per task — more than our server spent on the same task — so on this
2-core machine the client set the pace and the ratio measured it (1.4–1.7x while ours
spent 2.4–2.9x less server CPU per task than the peer). The generator spends 0.2–0.5 ms
per task; its CPU per task is printed beside each server's, so a reader can check that
it stays far below the server's (then the server set the pace).

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
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

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


# ---- the load generator (a process of its own for each server) ----------------------------------


class Connection:
    """One keep-alive HTTP/1.1 connection: one JSON-RPC POST at a time, its JSON answer.

    Raw asyncio streams: per request one formatted head and one write, then one read of
    the response head and one of its ``Content-Length`` body. httpx spent 3–6 ms of
    client CPU per task here, more than our server spent on it; this spends a small
    fraction of that, so the figures measure the servers."""

    def __init__(self, url: str) -> None:
        parts = urlsplit(url)
        if parts.scheme != "http" or parts.hostname is None or parts.port is None:
            raise ValueError(f"the load generator speaks plain http://host:port only: {url}")
        self.host, self.port, self.path = parts.hostname, parts.port, parts.path or "/"
        self._static = (
            f"POST {self.path} HTTP/1.1\r\nhost: {parts.netloc}\r\n"
            "content-type: application/json\r\naccept: application/json, text/event-stream\r\n"
            "mcp-protocol-version: 2026-07-28\r\n"
        )
        self._reader: asyncio.StreamReader | None = None
        self._writer: asyncio.StreamWriter | None = None

    async def open(self, deadline: float) -> None:
        """Connect, retrying while the server is not listening yet (until ``deadline``)."""
        while True:
            try:
                self._reader, self._writer = await asyncio.open_connection(self.host, self.port)
                return
            except OSError:
                if time.monotonic() > deadline:
                    raise
                await asyncio.sleep(0.05)

    def close(self) -> None:
        if self._writer is not None:
            self._writer.close()
        self._reader = self._writer = None

    async def post(self, method: str, name: str, body: bytes) -> dict[str, Any]:
        """POST ``body`` with the routing headers of ``method``; the parsed JSON answer."""
        if self._reader is None or self._reader.at_eof():
            # First use, or the server closed an idle keep-alive connection (between
            # rounds): a fresh one, before anything is sent on it.
            self.close()
            await self.open(time.monotonic() + STARTUP_LIMIT_S)
        assert self._reader is not None
        assert self._writer is not None
        head = f"{self._static}mcp-method: {method}\r\nmcp-name: {name}\r\n"
        self._writer.write(f"{head}content-length: {len(body)}\r\n\r\n".encode() + body)
        status, length, keep = _response_head(await self._reader.readuntil(b"\r\n\r\n"))
        payload = await self._reader.readexactly(length)
        if not keep:
            self.close()
        if status != 200:
            raise RuntimeError(f"{method}: HTTP {status}: {payload[:200]!r}")
        answer: dict[str, Any] = json.loads(payload)
        return answer


def _response_head(head: bytes) -> tuple[int, int, bool]:
    """(status, Content-Length, keep-alive) of an HTTP/1.1 response head."""
    lines = head.decode("latin-1").split("\r\n")
    status = int(lines[0].split(" ", 2)[1])
    length, keep = None, True
    for line in lines[1:]:
        name, _, value = line.partition(":")
        name = name.strip().lower()
        if name == "content-length":
            length = int(value)
        elif name == "connection":
            keep = value.strip().lower() != "close"
        elif name == "transfer-encoding":
            raise RuntimeError("the load generator reads Content-Length responses only")
    if length is None:
        raise RuntimeError(f"a response without Content-Length: {lines[0]}")
    return status, length, keep


class LoadGenerator:
    """Creates ``noop`` tasks and polls each to ``completed`` (2026-07-28 wire, raw JSON-RPC),
    with ``CONCURRENCY`` loops, each on keep-alive connections of its own.

    With several URLs (servers on one store) each task goes to the next URL in turn and is
    polled there."""

    def __init__(self, urls: list[str]) -> None:
        self.urls = urls
        self.ids = itertools.count(1)
        self._turn = itertools.cycle(range(len(urls)))
        self._loops = [[Connection(url) for url in urls] for _ in range(CONCURRENCY)]

    def close(self) -> None:
        for connections in self._loops:
            for connection in connections:
                connection.close()

    async def call(
        self, connection: Connection, method: str, params: dict[str, Any], name: str
    ) -> dict[str, Any]:
        body = {
            "jsonrpc": "2.0",
            "id": next(self.ids),
            "method": method,
            "params": {**params, "_meta": ENVELOPE},
        }
        payload = await connection.post(method, name, json.dumps(body).encode())
        if "result" not in payload:
            raise RuntimeError(f"{method} failed: {payload}")
        return dict(payload["result"])

    async def one_task(self, connections: list[Connection]) -> None:
        connection = connections[next(self._turn)]
        created = await self.call(
            connection, "tools/call", {"name": "noop", "arguments": {}}, "noop"
        )
        task_id = created["taskId"]
        deadline = time.monotonic() + TASK_LIMIT_S
        while True:
            task = await self.call(connection, "tasks/get", {"taskId": task_id}, task_id)
            if task["status"] == "completed":
                return
            if task["status"] != "working" or time.monotonic() > deadline:
                raise RuntimeError(f"task {task_id} ended {task['status']}")
            await asyncio.sleep(POLL_PAUSE_S)

    async def warm_up(self) -> None:
        """A few tasks one after the other (the first waits for the server to listen)."""
        for _ in range(WARMUP_TASKS):
            await self.one_task(self._loops[0])

    async def completed_within(self, seconds: float) -> tuple[int, float]:
        """(tasks completed, elapsed s) with CONCURRENCY loops for ``seconds``."""
        done = 0
        stop_at = time.perf_counter() + seconds

        async def loop(connections: list[Connection]) -> None:
            nonlocal done
            while time.perf_counter() < stop_at:
                await self.one_task(connections)
                done += 1

        started = time.perf_counter()
        await asyncio.gather(*(loop(connections) for connections in self._loops))
        return done, time.perf_counter() - started


async def generate_load(urls: list[str]) -> None:
    """The load generator process's loop: one command a line on stdin, one JSON line back.

    ``warm`` runs the warm-up; ``run SECONDS`` a measured round, answered with the tasks
    done, the elapsed seconds and this process's CPU seconds over the round."""
    generator = LoadGenerator(urls)
    loop = asyncio.get_running_loop()
    try:
        while command := (await loop.run_in_executor(None, sys.stdin.readline)).split():
            if command[0] == "warm":
                await generator.warm_up()
                answer: dict[str, float] = {}
            else:
                cpu = time.process_time()
                done, elapsed = await generator.completed_within(float(command[1]))
                answer = {"done": done, "elapsed": elapsed, "cpu": time.process_time() - cpu}
            print(json.dumps(answer), flush=True)
    finally:
        generator.close()


class Load:
    """The orchestrator's handle on one load generator process (a session of its own, as
    the servers have: the generator's CPU share is never the orchestrator's)."""

    def __init__(self, process: asyncio.subprocess.Process) -> None:
        self.process = process

    @classmethod
    async def start(cls, urls: list[str]) -> Load:
        path = os.pathsep.join([str(REPO_ROOT), os.environ.get("PYTHONPATH", "")])
        process = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "bench.bench_server", "load", *urls,
            cwd=REPO_ROOT,
            env={**os.environ, "PYTHONPATH": path},
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            start_new_session=True,
        )  # fmt: skip
        return cls(process)

    async def ask(self, command: str) -> dict[str, float]:
        assert self.process.stdin is not None
        assert self.process.stdout is not None
        self.process.stdin.write(f"{command}\n".encode())
        await self.process.stdin.drain()
        line = await self.process.stdout.readline()
        if not line:
            raise RuntimeError(f"the load generator stopped during {command!r}")
        answer: dict[str, float] = json.loads(line)
        return answer

    async def warm_up(self) -> None:
        await self.ask("warm")

    async def round(self, seconds: float) -> tuple[int, float, float]:
        """(tasks done, elapsed s, generator CPU s) of one measured round."""
        answer = await self.ask(f"run {seconds}")
        return int(answer["done"]), answer["elapsed"], answer["cpu"]

    async def stop(self) -> None:
        if self.process.stdin is not None:
            self.process.stdin.close()
        try:
            await asyncio.wait_for(self.process.wait(), 10)
        except TimeoutError:
            self.process.kill()
            await self.process.wait()


@contextlib.asynccontextmanager
async def loads(urls: dict[str, list[str]]) -> AsyncIterator[dict[str, Load]]:
    """A load generator per entry (its URLs), warmed up; stopped on the way out."""
    started: dict[str, Load] = {}
    try:
        for name, targets in urls.items():
            started[name] = await Load.start(targets)
        for load in started.values():
            await load.warm_up()
        yield started
    finally:
        for load in started.values():
            await load.stop()


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
    load_cpu_per_task_s: dict[str, float] | None = None,
) -> dict[str, float]:
    """Alternate short rounds between the servers (the same load generator, a process of
    its own for each) so load drift hits all alike; tasks/s of each. ``cpu_per_task_s``,
    when given, is filled with each server process's CPU seconds per task over the
    measured rounds (Linux): on a machine other work loads, what a server spends per task
    is steadier than how many it completes. ``load_cpu_per_task_s`` gets the same of each
    server's load generator: well below the server's, the server set the pace."""
    totals: dict[str, list[float]] = {name: [0, 0.0, 0.0] for name in servers}
    urls = {name: [f"http://127.0.0.1:{port}/mcp"] for name, (port, _) in servers.items()}
    async with loads(urls) as generators:
        cpu_before = {name: process_cpu_s(process) for name, (_, process) in servers.items()}
        for _ in range(ROUNDS):
            for name, generator in generators.items():
                with only_running(servers, name):
                    measured = await generator.round(RUN_S / ROUNDS)
                for index, value in enumerate(measured):
                    totals[name][index] += value
        cpu_after = {name: process_cpu_s(process) for name, (_, process) in servers.items()}
    for name, (done, _, load_cpu) in totals.items():
        before, after = cpu_before[name], cpu_after[name]
        if cpu_per_task_s is not None and before is not None and after is not None and done:
            cpu_per_task_s[name] = (after - before) / done
        if load_cpu_per_task_s is not None and done:
            load_cpu_per_task_s[name] = load_cpu / done
    return {name: done / elapsed for name, (done, elapsed, _) in totals.items()}


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


def cpu_note(
    cpu_per_task_s: dict[str, float], name: str, load: dict[str, float] | None = None
) -> str:
    """ ", server CPU N ms/task" for a server whose CPU was measured (else nothing), and
    ", load generator M ms/task" when ``load`` has its generator's."""
    note = ""
    if name in cpu_per_task_s:
        note += f", server CPU {cpu_per_task_s[name] * 1000:5.2f} ms/task"
    if load is not None and name in load:
        note += f", load generator {load[name] * 1000:4.2f} ms/task"
    return note


def process_cpu_s(process: subprocess.Popen[bytes]) -> float | None:
    """CPU seconds (user and system) a child process has used so far; None where
    ``/proc`` does not say (not Linux)."""
    try:
        with open(f"/proc/{process.pid}/stat") as stat:
            fields = stat.read().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def pg_rate(urls: list[str]) -> float:
    """Tasks/s through ``urls`` (servers sharing one PostgreSQL store), one load generator."""
    async with loads({"all": urls}) as generators:
        done, elapsed, _ = await generators["all"].round(RUN_S)
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
        return asyncio.run(pg_rate([f"http://127.0.0.1:{port}/mcp" for port, _ in servers]))
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
        load: dict[str, float] = {}
        try:
            rates = asyncio.run(compare(servers, cpu, load))
        finally:
            for _, process in servers.values():
                stop_server(process)
    ours, peer = rates["ours"], rates["peer"]
    ours_cpu = cpu_note(cpu, "ours", load)
    print(f"longcall.server (SQLite file, synchronous=FULL): {ours:8.1f} tasks/s{ours_cpu}")
    print(
        f"fastmcp + fastmcp-tasks (memory://, pickup {PEER_PICKUP_MS} ms): {peer:8.1f} tasks/s"
        f"{cpu_note(cpu, 'peer', load)}"
    )
    setup = f"{CONCURRENCY} clients, {ROUNDS} alternating rounds, {RUN_S:g} s per server"
    verdict = "meets" if ours / peer >= TARGET else "misses"
    print(f"ratio ours / peer: {ours / peer:.2f}x ({verdict} the >= {TARGET:g}x target; {setup})")


def main() -> None:
    """Child-process entry: serve one side of the benchmark, or generate its load."""
    if sys.argv[1:2] == ["load"]:
        asyncio.run(generate_load(sys.argv[2:]))
        return
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
