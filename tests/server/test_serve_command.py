"""``longcall serve`` as a user runs it: the address it announces is the one it serves,
and the open-task limit it is given is the one it keeps."""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

import httpx
import pytest
from tests.bounds import LOADED_MACHINE_S

from conftest import ModernClient, announced, start_logged, wait_ready

pytestmark = pytest.mark.anyio


async def test_port_zero_announces_the_port_it_chose(
    tmp_path: Path, http: httpx.AsyncClient
) -> None:
    """``--port 0`` binds a free port and prints that port (not 0); the server answers
    MCP there."""
    stdout = tmp_path / "stdout.txt"
    store = f"sqlite:///{tmp_path / 'serve.db'}"
    argv = [sys.executable, "-m", "longcall", "serve", "--store", store, "--port", "0"]
    process = start_logged(argv, stdout, stream="stdout")
    try:
        url = await announced(process, stdout, r"serving MCP at (http://\S+/mcp)")
        port = int(url.rsplit(":", 1)[1].split("/", 1)[0])
        assert port != 0
        client = ModernClient(http, url)
        await wait_ready(process, client)
        assert await client.result("server/discover")
    finally:
        if process.poll() is None:
            process.send_signal(signal.SIGINT)
            process.wait(timeout=LOADED_MACHINE_S)


async def test_max_open_tasks_is_the_limit_the_server_keeps(
    tmp_path: Path, http: httpx.AsyncClient
) -> None:
    """``--max-open-tasks 2``: a caller's third open task is refused with 429 naming
    the limit (the default of 1,000 once stopped a 10,000-operation benchmark)."""
    stdout = tmp_path / "stdout.txt"
    store = f"sqlite:///{tmp_path / 'serve.db'}"
    argv = [sys.executable, "-m", "longcall", "serve", "--store", store, "--port", "0"]
    process = start_logged([*argv, "--max-open-tasks", "2"], stdout, stream="stdout")
    try:
        url = await announced(process, stdout, r"serving MCP at (http://\S+/mcp)")
        client = ModernClient(http, url)
        await wait_ready(process, client)
        for _ in range(2):
            await client.create("sleep_report", {"seconds": 60, "rows": 0})
        refused = await client.post(
            "tools/call", {"name": "sleep_report", "arguments": {"seconds": 60, "rows": 0}}
        )
    finally:
        if process.poll() is None:
            process.send_signal(signal.SIGINT)
            process.wait(timeout=LOADED_MACHINE_S)
    assert refused.status_code == 429
    assert refused.json()["error"]["data"] == {"limit": 2}


def test_the_commands_defaults_are_the_servers() -> None:
    """``longcall serve`` writes its defaults out (the CLI starts without importing the
    server): they must be the server's own."""
    from longcall.cli.serve import serve
    from longcall.server.options import DEFAULT_LEASE_S, DEFAULT_MAX_OPEN_TASKS_PER_PRINCIPAL

    defaults = {p.name: p.default for p in serve.params}
    assert defaults["max_open_tasks"] == DEFAULT_MAX_OPEN_TASKS_PER_PRINCIPAL
    assert defaults["lease_seconds"] == DEFAULT_LEASE_S


def test_an_open_task_limit_below_one_is_refused() -> None:
    """0 would refuse every task: the command says so and exits non-zero, serving nothing."""
    argv = [sys.executable, "-m", "longcall", "serve", "--max-open-tasks", "0"]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=LOADED_MACHINE_S)
    assert done.returncode == 2
    assert "--max-open-tasks" in done.stderr


@pytest.mark.parametrize(
    ("args", "code", "fragment"),
    [
        (["--port", "-1"], 2, "'--port': -1 is not in the range 0<=x<=65535"),
        (["--port", "70000"], 2, "'--port': 70000 is not in the range 0<=x<=65535"),
        (["--metrics-port", "-1"], 2, "'--metrics-port': -1 is not in the range 0<=x<=65535"),
        (["--store", "mysql://x", "--port", "0"], 1, "unsupported task store URL"),
        (["--store", "", "--port", "0"], 1, "names no file"),
        (
            ["--host", "256.1.1.1", "--port", "0", "--store", "sqlite:///:memory:"],
            1,
            "cannot serve on 256.1.1.1:0",
        ),
    ],
)
def test_serve_fails_in_one_line(tmp_path: Path, args: list[str], code: int, fragment: str) -> None:
    """``longcall serve`` with a value no server can use, or a store or address it
    cannot open: one line on stderr, no traceback, a non-zero exit."""
    argv = [sys.executable, "-m", "longcall", "serve", *args]
    done = subprocess.run(
        argv, capture_output=True, text=True, timeout=LOADED_MACHINE_S, cwd=tmp_path
    )
    assert done.returncode == code, done.stderr
    assert "Traceback" not in done.stderr
    assert fragment in done.stderr
