"""FastMCP task throughput: one FastMCP app, three task backends, one run.

The same app (a FastMCP server with the required-task tool ``noop``) runs in its own
process three times over: on ``LongcallTasks`` with a SQLite file (``synchronous=FULL``:
every commit fsynced), on fastmcp-tasks with its default ``memory://`` backend (nothing
durable), and on fastmcp-tasks with Redis at 127.0.0.1:6379 (skipped, said so, when no
Redis answers). The client, concurrency and alternating short rounds are
``bench_server``'s, so load drift hits every side alike; fastmcp-tasks' worker is tuned
as there (pickup interval 1 ms, concurrency = the client's), and each server process
has a session of its own, as there. Target: LongcallTasks /
each fastmcp-tasks backend >= 1.0. Each server's CPU per task over the measured rounds
is printed too: on a machine other work loads, it is steadier than tasks/s.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import secrets
import socket
import subprocess
import sys
import tempfile
from datetime import timedelta
from pathlib import Path
from typing import Any

from bench.bench_server import (
    CONCURRENCY,
    PEER_PICKUP_MS,
    REPO_ROOT,
    ROUNDS,
    RUN_S,
    compare,
    cpu_note,
    free_port,
    stop_server,
)

REDIS_URL = "redis://127.0.0.1:6379/0"


def serve(port: int, backend: str, store: str) -> None:
    """The app on ``backend`` (``longcall``, ``memory`` or ``redis``) at 127.0.0.1:port."""
    import uvicorn
    from fastmcp import FastMCP
    from fastmcp.utilities.tasks import TaskConfig

    from longcall.runtime.listen import listening_socket

    mcp = FastMCP("bench")
    if backend == "longcall":
        from longcall.integrations.fastmcp import LongcallTasks

        mcp.add_extension(LongcallTasks(store=f"sqlite:///{store}"))
    else:
        from fastmcp_tasks import TasksExtension

        mcp.add_extension(
            TasksExtension(
                url="memory://" if backend == "memory" else REDIS_URL,
                name=f"bench-{secrets.token_hex(4)}",
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


def start(backend: str, store: str) -> tuple[int, subprocess.Popen[bytes]]:
    port = free_port()
    path = os.pathsep.join([str(REPO_ROOT), os.environ.get("PYTHONPATH", "")])
    process = subprocess.Popen(
        [sys.executable, "-m", "bench.bench_fastmcp", backend, store, "--port", str(port)],
        cwd=REPO_ROOT,
        env={**os.environ, "PYTHONPATH": path},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    return port, process


def redis_unreachable() -> str | None:
    """Why Redis cannot be used here (``None`` when it answers a PING)."""
    try:
        with socket.create_connection(("127.0.0.1", 6379), timeout=2) as sock:
            sock.sendall(b"PING\r\n")
            if not sock.recv(16).startswith(b"+PONG"):
                return "no PONG"
    except OSError as exc:
        return str(exc) or type(exc).__name__
    return None


def run() -> None:
    """The three backends in one run; figures and the ratios."""
    try:
        import fastmcp_tasks  # noqa: F401
    except ImportError:
        print("FastMCP backends: not measured (fastmcp-tasks is not installed here)")
        return
    with tempfile.TemporaryDirectory() as directory:
        store = str(Path(directory) / "bench-tasks.db")
        backends = ["longcall", "memory"]
        redis_reason = redis_unreachable()
        if redis_reason is None:
            backends.append("redis")
        servers = {name: start(name, store) for name in backends}
        cpu: dict[str, float] = {}
        try:
            rates = asyncio.run(compare(servers, cpu))
        finally:
            for _, process in servers.values():
                stop_server(process)
    ours = rates["longcall"]
    labels = {
        "longcall": "FastMCP + LongcallTasks (SQLite file, synchronous=FULL)",
        "memory": "FastMCP + fastmcp-tasks (memory://)",
        "redis": "FastMCP + fastmcp-tasks (Redis 127.0.0.1:6379)",
    }
    for name, rate in rates.items():
        print(f"{labels[name] + ':':56} {rate:8.1f} tasks/s{cpu_note(cpu, name)}")
    if "redis" not in rates:
        print(f"FastMCP + fastmcp-tasks (Redis): not measured ({redis_reason})")
    setup = f"{CONCURRENCY} clients, {ROUNDS} alternating rounds, {RUN_S:g} s per server"
    print(
        f"ratio LongcallTasks / memory://: {ours / rates['memory']:.2f}x (target >= 1.0x; {setup})"
    )
    if "redis" in rates:
        print(f"ratio LongcallTasks / Redis:     {ours / rates['redis']:.2f}x (target >= 1.0x)")


def main() -> None:
    """Child-process entry: serve the app on one backend."""
    parser = argparse.ArgumentParser()
    parser.add_argument("backend", choices=["longcall", "memory", "redis"])
    parser.add_argument("store")
    parser.add_argument("--port", type=int, required=True)
    args = parser.parse_args()
    serve(args.port, args.backend, args.store)


if __name__ == "__main__":
    main()
