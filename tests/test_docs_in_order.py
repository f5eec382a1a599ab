"""The README tour and then the guide, run in the order a user copies them, on ONE
default ledger (a fresh data directory, no ``--ledger``, no ``$LONGCALL_LEDGER``),
against a real ``longcall serve`` on 127.0.0.1 with a free port put in for 8765.

Every ``longcall`` line of a console block runs as a separate process, and every Python
block as a script, in document order. A line ending in ``&`` (or the guide's foreground
``longcall worker``) runs in the background, as a user's second terminal does, and is
stopped with Ctrl-C at the end. No command may fail because another example used its
call node, and none may print a traceback. Left out, and why: the PostgreSQL block (it
names another ledger), ``longcall sim`` and ``longcall gateway`` (see LEFT_OUT), and
Python fragments that do not call the reference server (another program's code: an MCP
host's client, a FastMCP app)."""

from __future__ import annotations

import asyncio
import os
import re
import shlex
import signal
import socket
import sys
import textwrap
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[1]
DOC_PORT = "8765"
STEP_TIMEOUT_S = 120.0
REFUSED = 5
DOCUMENTED_REFUSALS = ("approved=maybe", " NODE ")
"""Lines the docs show being refused (a wrong-shaped answer, a placeholder node)."""
LEFT_OUT = ("sim", "gateway")
"""``sim`` touches no ledger (its 10,000 permutations take minutes; it has its own
tests); ``gateway`` serves the servers of the user's own servers file (~/servers.toml),
which the docs show only as an example (the gateway has its own tests)."""
LONG_RUNNING = ("console",)
"""Commands that serve until stopped: started in the background, stopped at the end."""
NOT_EXAMPLES = ("export LONGCALL_LEDGER=",)
"""A console block with one of these is not for the default ledger: left out."""
COLLISIONS = ("RequestDigestMismatch", "holds another request", "was called at", "bound to")


@dataclass(frozen=True, slots=True, kw_only=True)
class Step:
    kind: str  # "console" or "python"
    text: str
    where: str


def steps_of(path: Path) -> list[Step]:
    """Every console command and Python block of a Markdown file, in order."""
    found: list[Step] = []
    text = path.read_text(encoding="utf-8")
    for match in re.finditer(r"```(console|python)\n(.*?)```", text, re.DOTALL):
        kind, body = match.group(1), match.group(2)
        line_no = text[: match.start()].count("\n") + 1
        where = f"{path.name}:{line_no}"
        if kind == "python":
            found.append(Step(kind="python", text=textwrap.dedent(body), where=where))
            continue
        if any(marker in body for marker in NOT_EXAMPLES):
            continue
        for line in body.splitlines():
            commands = line.removeprefix("$ ").strip().split(" ; ")
            found.extend(
                Step(kind="console", text=command, where=where)
                for command in commands
                if command.startswith("longcall ")
            )
    return found


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass
class User:
    """One user's shell: the same environment, working directory and data directory."""

    env: dict[str, str]
    cwd: Path
    port: int
    background: list[asyncio.subprocess.Process] = field(default_factory=list)
    worker_lines: list[str] = field(default_factory=list)
    worker_line_seen: asyncio.Event = field(default_factory=asyncio.Event)

    def argv(self, command: str) -> list[str]:
        words = shlex.split(command.replace(DOC_PORT, str(self.port)), comments=True)
        assert words[0] == "longcall"
        if words[-1] == "&":
            words.pop()  # in the background: how it is started says so
        return [sys.executable, "-m", "longcall", *words[1:]]

    async def start(self, argv: list[str]) -> asyncio.subprocess.Process:
        process = await asyncio.create_subprocess_exec(
            *argv, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
            env=self.env, cwd=self.cwd,
        )  # fmt: skip
        self.background.append(process)
        return process

    async def run(self, argv: list[str], stdin: bytes | None = None) -> tuple[int, str]:
        process = await asyncio.create_subprocess_exec(
            *argv, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
            stdin=asyncio.subprocess.PIPE if stdin is not None else None,
            env=self.env, cwd=self.cwd,
        )  # fmt: skip
        async with asyncio.timeout(STEP_TIMEOUT_S):
            out, _ = await process.communicate(stdin)
        assert process.returncode is not None
        return process.returncode, out.decode()

    async def follow_worker(self, process: asyncio.subprocess.Process) -> None:
        assert process.stdout is not None
        while raw := await process.stdout.readline():
            self.worker_lines.append(raw.decode())
            self.worker_line_seen.set()

    async def until_worker_says(self, text: str) -> None:
        """Wait (bounded) until a running worker has printed ``text``, as a user waits
        for the question before pasting its answer."""
        async with asyncio.timeout(STEP_TIMEOUT_S):
            while not any(text in line for line in self.worker_lines):
                self.worker_line_seen.clear()
                await self.worker_line_seen.wait()


@pytest.fixture
async def user(tmp_path: Path) -> AsyncIterator[User]:
    """A fresh data and config directory, and no ledger named anywhere."""
    env = {k: v for k, v in os.environ.items() if k not in ("LONGCALL_LEDGER", "COLUMNS")}
    env.update(XDG_DATA_HOME=str(tmp_path / "data"), XDG_CONFIG_HOME=str(tmp_path / "config"))
    env.pop("LONGCALL_SERVERS", None)
    shell = User(env=env, cwd=tmp_path, port=free_port())
    try:
        yield shell
    finally:
        for process in shell.background:
            if process.returncode is None:
                process.send_signal(signal.SIGINT)
        for process in shell.background:
            try:
                async with asyncio.timeout(STEP_TIMEOUT_S):
                    await process.wait()
            except TimeoutError:
                process.kill()


SERVE_SNIPPET = """
import asyncio
from longcall.runtime.listen import listening_socket
from tools import server  # the snippet, as the user saved it

sock = listening_socket("127.0.0.1", 0)
print(sock.getsockname()[1], flush=True)
asyncio.run(server.serve(sock=sock))
"""


async def serve_the_snippet(user: User, step: Step) -> None:
    """The README's server snippet saved as tools.py (as it says), served, and both its
    tools called through the command line; its task store lands in the directory."""
    (user.cwd / "tools.py").write_text(step.text, encoding="utf-8")
    process = await user.start([sys.executable, "-c", SERVE_SNIPPET])
    assert process.stdout is not None
    async with asyncio.timeout(STEP_TIMEOUT_S):
        while not (line := await process.stdout.readline()).strip().isdigit():
            assert line, "the snippet's server ended before serving"
    port = int(line)
    url = f"http://127.0.0.1:{port}/mcp"
    for tool, args in (("report", '{"rows": 2}'), ("add", '{"a": 2, "b": 3}')):
        argv = [sys.executable, "-m", "longcall", "call", url, tool, "--args", args, "--wait"]
        status, out = await user.run(argv)
        assert status == 0, f"{step.where}: the snippet's {tool} failed:\n{out[-2000:]}"
    assert (user.cwd / "tasks.db").exists()
    process.send_signal(signal.SIGINT)


async def test_readme_then_guide_in_order_on_one_default_ledger(user: User) -> None:
    """Every example, in the order a user copies them, on one default ledger."""
    steps = steps_of(ROOT / "README.md") + steps_of(ROOT / "docs" / "guide.md")
    assert len(steps) > 20
    served = False
    followers: list[asyncio.Task[None]] = []
    ran: list[str] = []
    for step in steps:
        if step.kind == "python" and "server.serve(" in step.text:
            await serve_the_snippet(user, step)
            ran.append(f"python server {step.where}")
            continue
        if step.kind == "python" and f"127.0.0.1:{DOC_PORT}" not in step.text:
            continue  # a fragment for another program (a host's client, FastMCP's app)
        if step.kind == "python":
            code = step.text.replace(f"127.0.0.1:{DOC_PORT}", f"127.0.0.1:{user.port}")
            status, out = await user.run([sys.executable, "-"], stdin=code.encode())
            assert status == 0, f"{step.where}: the Python example failed:\n{out[-3000:]}"
            ran.append(f"python {step.where}")
            continue
        words = step.text.split()
        if words[1] in LEFT_OUT:
            continue
        if words[1] == "serve":
            if not served:
                process = await user.start(user.argv(step.text))
                assert process.stdout is not None
                async with asyncio.timeout(STEP_TIMEOUT_S):
                    while b"serving MCP at" not in (line := await process.stdout.readline()):
                        assert line, "longcall serve ended before serving"
                served = True
            continue
        if words[1] == "worker":
            process = await user.start(user.argv(step.text))
            followers.append(asyncio.ensure_future(user.follow_worker(process)))
            continue
        if words[1] in LONG_RUNNING:
            await user.start(user.argv(step.text))  # serves until stopped, as in a terminal
            continue
        if words[1:3] == ["ops", "answer"] and followers:
            await user.until_worker_says(f"{words[3]} needs an answer")
        status, out = await user.run(user.argv(step.text))
        ran.append(f"{status} {step.text}")
        context = f"{step.where}: `{step.text}` exited {status}:\n{out[-2000:]}"
        assert "Traceback" not in out, context
        assert not any(collision in out for collision in COLLISIONS), context
        if any(mark in f"{step.text} " for mark in DOCUMENTED_REFUSALS):
            assert status == REFUSED, context
        else:
            assert status in (0, 3, 4, 7), context
    for follower in followers:
        follower.cancel()
    assert any("python" in r for r in ran), ran
    assert any("ops answer" in r for r in ran), ran


def test_the_readme_says_how_longcall_gets_on_path_before_the_tour() -> None:
    """After `make demo` the command is in .venv/bin: the README says to activate it (or
    to install the package) before its first `longcall` command."""
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    first_command = text.index("\nlongcall serve")
    assert -1 < text.find(". .venv/bin/activate") < first_command
    assert -1 < text.find("pip install .") < first_command
