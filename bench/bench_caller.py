"""The caller's CPU per operation against the wire floor, measured in the same run.

Against one ``longcall serve`` (its own process, SQLite store at ``synchronous=normal``),
``OPERATIONS`` calls of ``sleep_report(seconds=0, rows=1)`` are made three ways, in
alternating rounds so that load swings hit each alike:

- **floor**: a bare client (httpx, no ledger, no engine) making the same wire exchanges
  as ours: one 2026-07-28 ``tools/call`` with the tasks extension, then ``tasks/get``
  (the task's pollInterval apart) until ``completed``; ``CONCURRENCY`` lanes, each a
  client of its own over one keep-alive connection, making sequence after sequence.
  Nothing is counted per request but what the client side counts too (an event hook);
  connections are counted where they are opened. (The floor once shared one pool of 32
  connections and put a trace hook on every request: httpcore's pool upkeep, which
  scans every pooled connection and counts each idle one against all the others,
  made that floor 3–4 times dearer than the exchanges themselves.)
- **client**: the public ``longcall.Client`` with its own SQLite ledger
  (``synchronous=normal``), ``CONCURRENCY`` calls at a time. It makes the floor's
  exchanges: the tool is described (``tools/list``) by the warm-up call, and later
  calls take that listing, for ``longcall serve`` offers the lookup by submission key
  and ``sleep_report`` is not read-only, so no hint in it can age into a wrong decision
  (docs/design/caller-api.md); a server or tool where one could gets a ``tools/list``
  per call (calls made together share one);
- **worker**: ``longcall worker --until-idle --quiet`` (a child process) driving the same
  number of operations written unowned into its ledger beforehand; its start-up (a run
  that finds nothing to do) is taken off. It makes one exchange more per operation than
  the floor: a record it did not create may have been sent already, so it looks the
  submission up by its key before it sends it.

The figure is CPU time of the caller process (user + system, ``getrusage``), never wall
time: other processes share the machine's cores. Targets: client / floor <= 5 and
worker / floor <= 5. The exchanges per operation and the connections opened are counted
for the floor and the client.

Where the client's time went (py-spy ``--gil``, 192 calls, shares of the samples):

- before (22–24 ms/op): the push stream, reopened for nearly every call (0.8
  ``subscriptions/listen`` per call) 22%; httpx/httpcore for ``tools/call`` and
  ``tasks/get`` 16% (one shared pool of connections); asyncio's loop 14%; handing work
  to the ledger thread and back (20 turns per call) 12%; ``tools/list`` 10%; the ledger
  thread's own work 8%; the adapters 3%.
- after (13–17 ms/op on the same machine): httpx/httpcore 19% (one connection per
  call in flight, reused); asyncio's loop 18%; ledger-thread handoffs (11 turns per
  call) 16%; ``tools/list`` 14%; the adapters 9%; the ledger thread 7%. No push stream
  is opened for operations polled more often than every second, each request runs on
  a keep-alive lane of its own (:class:`longcall.adapters.http.LaneTransport`), and
  the replies that came back are applied together at the engine's next turn.
- then (8.7–10.2 ms/op; yappi, CPU clock, every thread, shares of the profiled time):
  before, HTTP requests 60% (the tool's description 14% of it: 0.6–0.84
  ``tools/list`` per call), the ledger thread 16%, the loop's steps 5%, ``Client.call``
  itself 4%; after, HTTP requests 55% (the description 1%: none sent after the first),
  the ledger thread 20%, the loop's steps 8%, ``Client.call`` 4%. A wake-up from the
  ledger thread is one thread-safe hand-over (it was two), and a lane's response body
  is read through the inner stream's own iterator. Per request, ``HttpDriver`` costs
  about 1.1 times the floor's ``httpx`` post; what is left is httpx, the ledger's
  commits and the hand-overs between the loop and the ledger thread.

``python -m bench.bench_caller floor|client|worker`` runs one side alone (for a profiler).
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import os
import resource
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpcore
import httpx

OPERATIONS = int(os.environ.get("LONGCALL_BENCH_CALLER_OPS", "192"))
CONCURRENCY = 32
FLOOR_LANES = CONCURRENCY
ROUNDS = 3
TARGET = 5.0
STARTUP_LIMIT_S = 60.0
TASK_LIMIT_S = 60.0
ARGUMENTS = {"seconds": 0, "rows": 1}
ENVELOPE = {
    "io.modelcontextprotocol/protocolVersion": "2026-07-28",
    "io.modelcontextprotocol/clientCapabilities": {
        "extensions": {"io.modelcontextprotocol/tasks": {}}
    },
    "io.modelcontextprotocol/clientInfo": {"name": "bench", "version": "0"},
}


def cpu_s() -> float:
    """CPU seconds of this process so far, every thread (user + system)."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def start_server(directory: Path) -> tuple[str, subprocess.Popen[bytes]]:
    """``longcall serve`` on a free port, a SQLite store at synchronous=normal."""
    port = _free_port()
    store = f"sqlite:///{directory}/tasks.db?synchronous=normal"
    process = subprocess.Popen(
        [sys.executable, "-m", "longcall", "serve", "--store", store, "--port", str(port),
         "--max-open-tasks", "100000"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    deadline = time.monotonic() + STARTUP_LIMIT_S
    while True:
        with socket.socket() as sock:
            if sock.connect_ex(("127.0.0.1", port)) == 0:
                return f"http://127.0.0.1:{port}/mcp", process
        if process.poll() is not None or time.monotonic() > deadline:
            raise RuntimeError("longcall serve did not start")
        time.sleep(0.05)


def stop_server(process: subprocess.Popen[bytes]) -> None:
    process.terminate()
    try:
        process.wait(timeout=10)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait(timeout=10)


# ---- the floor ---------------------------------------------------------------------------------


class Counted:
    """Requests sent, by JSON-RPC method (read from the ``mcp-method`` header), and TCP
    connections opened. Both are counted where they cost nothing per request: an event
    hook on the request (the same for the floor and the client), and the connection
    pool's network backend (per connection, not per request: a trace hook on every
    request made the floor itself several times dearer than the wire exchanges)."""

    def __init__(self) -> None:
        self.by_method: dict[str, int] = {}
        self.connections = 0

    async def request(self, request: httpx.Request) -> None:
        method = request.headers.get("mcp-method", request.method)
        self.by_method[method] = self.by_method.get(method, 0) + 1

    def watch(self, http: httpx.AsyncClient) -> None:
        """Count the connections ``http`` opens (through its transport's pools)."""
        transport = http._transport
        make_lane = getattr(transport, "_lane", None)
        if make_lane is None:  # httpx's own transport: one pool
            self._watch_pool(transport)
            return

        def lane(limits: httpx.Limits) -> Any:  # longcall's lanes: a pool each
            made = make_lane(limits)
            self._watch_pool(made)
            return made

        transport._lane = lane  # type: ignore[attr-defined]

    def _watch_pool(self, transport: Any) -> None:
        pool = transport._pool
        pool._network_backend = _CountingBackend(pool._network_backend, self)


class _CountingBackend(httpcore.AsyncNetworkBackend):
    def __init__(self, inner: httpcore.AsyncNetworkBackend, counted: Counted) -> None:
        self.inner = inner
        self.counted = counted

    async def connect_tcp(self, *args: Any, **kwargs: Any) -> httpcore.AsyncNetworkStream:
        self.counted.connections += 1
        return await self.inner.connect_tcp(*args, **kwargs)

    async def sleep(self, seconds: float) -> None:
        await self.inner.sleep(seconds)


async def _floor_sequence(http: httpx.AsyncClient, url: str, ids: itertools.count[int]) -> None:
    """One operation as a bare client makes it, over one keep-alive connection."""

    async def call(method: str, params: dict[str, Any], name: str) -> dict[str, Any]:
        headers = {
            "accept": "application/json, text/event-stream",
            "content-type": "application/json",
            "mcp-protocol-version": "2026-07-28",
            "mcp-method": method,
            "mcp-name": name,
        }
        body = {"jsonrpc": "2.0", "id": next(ids), "method": method,
                "params": {**params, "_meta": ENVELOPE}}  # fmt: skip
        response = await http.post(url, content=json.dumps(body).encode(), headers=headers)
        payload = response.json()
        if "result" not in payload:
            raise RuntimeError(f"{method} failed: {payload}")
        return dict(payload["result"])

    params = {"name": "sleep_report", "arguments": ARGUMENTS}
    created = await call("tools/call", params, "sleep_report")
    task_id = created["taskId"]
    pause = created.get("pollIntervalMs", 500) / 1000
    while True:
        await asyncio.sleep(pause)
        task = await call("tasks/get", {"taskId": task_id}, task_id)
        if task["status"] == "completed":
            return
        if task["status"] != "working":
            raise RuntimeError(f"task {task_id} ended {task['status']}")
        pause = task.get("pollIntervalMs", 500) / 1000


async def floor_round(url: str, count: int) -> tuple[float, Counted]:
    """CPU seconds of ``count`` bare operations, ``CONCURRENCY`` at a time."""
    counted = Counted()
    ids = itertools.count(1)
    left = iter(range(count))
    # One keep-alive connection per sequence in flight, each in a client of its own: a
    # lane makes sequence after sequence over its connection. (One shared pool of 32
    # connections cost several times the wire exchanges themselves: httpcore scans
    # every pooled connection, and checks each against every other, per request.)
    limits = httpx.Limits(max_connections=1, max_keepalive_connections=1)
    async with contextlib.AsyncExitStack() as stack:
        lanes = []
        for _ in range(min(FLOOR_LANES, count)):
            http = await stack.enter_async_context(
                httpx.AsyncClient(
                    timeout=TASK_LIMIT_S, limits=limits, event_hooks={"request": [counted.request]}
                )
            )
            counted.watch(http)
            lanes.append(http)

        async def lane(http: httpx.AsyncClient) -> None:
            for _ in left:
                await _floor_sequence(http, url, ids)

        started = cpu_s()
        await asyncio.gather(*(lane(http) for http in lanes))
        spent = cpu_s() - started
    return spent, counted


# ---- longcall.Client ---------------------------------------------------------------------------


async def client_round(url: str, count: int, ledger_path: Path, tag: str) -> tuple[float, Counted]:
    """CPU seconds of ``count`` calls through ``longcall.Client``, ``CONCURRENCY`` at a time."""
    from longcall import Client
    from longcall.adapters import http as http_driver

    counted = Counted()
    original = http_driver.HttpDriver.__init__

    def counting_init(self: Any, *args: Any, **kwargs: Any) -> None:
        original(self, *args, **kwargs)
        self.http.event_hooks["request"].append(counted.request)
        counted.watch(self.http)

    http_driver.HttpDriver.__init__ = counting_init  # type: ignore[method-assign]
    try:
        async with Client(f"sqlite:///{ledger_path}?synchronous=normal") as client:
            # The binding (negotiation, tools/list) is made once, outside the figure.
            await client.call(url, "sleep_report", ARGUMENTS, node=f"{tag}-warm")
            counted.by_method.clear()
            counted.connections = 0
            gate = asyncio.Semaphore(CONCURRENCY)

            async def one(i: int) -> None:
                async with gate:
                    result = await client.call(url, "sleep_report", ARGUMENTS, node=f"{tag}-{i}")
                    if result.state.value != "accepted":
                        raise RuntimeError(f"{tag}-{i} ended {result.state.value}")

            started = cpu_s()
            await asyncio.gather(*(one(i) for i in range(count)))
            spent = cpu_s() - started
    finally:
        http_driver.HttpDriver.__init__ = original  # type: ignore[method-assign]
    return spent, counted


# ---- longcall worker ---------------------------------------------------------------------------


async def _binding(url: str, ledger_path: Path) -> Any:
    from longcall.ledger import open_ledger
    from longcall.runtime.executor import Executor

    with open_ledger(f"sqlite:///{ledger_path}") as ledger:
        executor = Executor(ledger)
        try:
            return await executor.bind(url, "sleep_report")
        finally:
            await executor.aclose()


def seed_unowned(url: str, count: int, ledger_path: Path, tag: str) -> None:
    """``count`` operations created unowned (not yet sent), for a worker to drive."""
    from longcall.core import new_operation
    from longcall.core.keys import canonical_json, request_digest
    from longcall.ledger import open_ledger
    from longcall.runtime.step import REQUEST_BLOB

    binding = asyncio.run(_binding(url, ledger_path))
    with open_ledger(f"sqlite:///{ledger_path}?synchronous=off") as ledger:
        for i in range(count):
            arguments = dict(ARGUMENTS)
            record = new_operation(
                call_node_id=f"{tag}-{i}",
                request_digest=request_digest(binding.tool_name, arguments),
                tool_name=binding.tool_name,
                tool_descriptor_digest=binding.descriptor_digest,
                principal="bench",
                server=binding.server,
                protocol=binding.protocol,
                adapter_version=binding.adapter_version,
                now=time.time(),
                submission_lookup=binding.submission_lookup,
                tool_idempotent=binding.idempotent,
                caller_key=ledger.caller_key,
                server_store_id=binding.store_id,
            ).record
            ledger.create(record, blobs={REQUEST_BLOB: canonical_json(arguments)}, owner=None)


def worker_round(url: str, count: int, ledger_path: Path, tag: str) -> float:
    """CPU seconds a ``longcall worker --until-idle`` process spends on ``count`` operations
    (its start-up, measured by a run with none, taken off)."""
    seed_unowned(url, count, ledger_path, tag)
    ledger = f"sqlite:///{ledger_path}?synchronous=normal"
    command = [sys.executable, "-m", "longcall", "worker", "--until-idle", "--quiet",
               "--ledger", ledger, "--qps", "1000"]  # fmt: skip
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, status, usage = os.wait4(process.pid, 0)
    process.returncode = os.waitstatus_to_exitcode(status)
    if process.returncode != 0:
        assert process.stderr is not None
        raise RuntimeError(f"longcall worker failed: {process.stderr.read().decode()[-2000:]}")
    if process.stderr is not None:
        process.stderr.close()
    return usage.ru_utime + usage.ru_stime


def worker_idle(ledger_path: Path) -> float:
    """CPU seconds of a worker that finds nothing to do (start-up and exit)."""
    command = [sys.executable, "-m", "longcall", "worker", "--until-idle", "--quiet",
               "--ledger", f"sqlite:///{ledger_path}?synchronous=normal"]  # fmt: skip
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    _, _, usage = os.wait4(process.pid, 0)
    return usage.ru_utime + usage.ru_stime


# ---- the run -----------------------------------------------------------------------------------


def _per_method(counted: Counted, count: int) -> str:
    parts = [f"{m} {n / count:.2f}" for m, n in sorted(counted.by_method.items())]
    return ", ".join(parts) + f"; {counted.connections} connections"


def run() -> None:
    figures: dict[str, list[float]] = {"floor": [], "client": [], "worker": []}
    exchanges: dict[str, str] = {}
    with tempfile.TemporaryDirectory(prefix="longcall-bench-caller-") as tmp:
        directory = Path(tmp)
        url, server = start_server(directory)
        try:
            asyncio.run(floor_round(url, CONCURRENCY))  # warm the server up
            for index in range(ROUNDS):
                spent, counted = asyncio.run(floor_round(url, OPERATIONS))
                figures["floor"].append(spent / OPERATIONS)
                exchanges["floor"] = _per_method(counted, OPERATIONS)
                ledger = directory / f"client-{index}.db"
                spent, counted = asyncio.run(client_round(url, OPERATIONS, ledger, f"c{index}"))
                figures["client"].append(spent / OPERATIONS)
                exchanges["client"] = _per_method(counted, OPERATIONS)
                ledger = directory / f"worker-{index}.db"
                idle = worker_idle(directory / f"idle-{index}.db")
                spent = worker_round(url, OPERATIONS, ledger, f"w{index}")
                figures["worker"].append(max(spent - idle, 0.0) / OPERATIONS)
        finally:
            stop_server(server)
    floor, client, worker = (statistics.median(figures[k]) for k in ("floor", "client", "worker"))
    print(
        f"caller CPU per operation, sleep_report(seconds=0) against longcall serve, "
        f"{OPERATIONS} operations {CONCURRENCY} at a time (median of {ROUNDS} alternating rounds):"
    )
    print(f"  wire floor (bare httpx, no ledger): {floor * 1000:6.2f} ms [{exchanges['floor']}]")
    for name, figure in (("longcall.Client", client), ("longcall worker", worker)):
        verdict = "meets" if figure / floor <= TARGET else "misses"
        detail = f" [{exchanges['client']}]" if name == "longcall.Client" else ""
        print(
            f"  {name}: {figure * 1000:6.2f} ms -> {figure / floor:.1f}x the floor "
            f"({verdict} the <= {TARGET:g}x target){detail}"
        )


def main() -> None:
    """One side alone, for a profiler: ``floor``, ``client`` or ``worker``."""
    side = sys.argv[1]
    count = int(sys.argv[2]) if len(sys.argv) > 2 else OPERATIONS
    with tempfile.TemporaryDirectory(prefix="longcall-bench-caller-") as tmp:
        directory = Path(tmp)
        url, server = start_server(directory)
        try:
            if side == "floor":
                spent, counted = asyncio.run(floor_round(url, count))
                print(f"floor {spent / count * 1000:.2f} ms/op {_per_method(counted, count)}")
            elif side == "client":
                spent, counted = asyncio.run(client_round(url, count, directory / "c.db", "c"))
                print(f"client {spent / count * 1000:.2f} ms/op {_per_method(counted, count)}")
            else:
                spent = worker_round(url, count, directory / "w.db", "w")
                print(f"worker {spent / count * 1000:.2f} ms/op (start-up included)")
        finally:
            stop_server(server)


if __name__ == "__main__":
    main()
