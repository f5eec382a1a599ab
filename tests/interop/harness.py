"""Processes of the interop suite: peers we did not write and the ``longcall`` CLI.

Owns: where the Node 22 toolchain and the Python peers' venvs installed by ``make
interop`` live; the TypeScript SDK task peer (``interop/task-peer.mjs``) and the Python
peers (``interop/py-*/peer.py``, each in its own venv) as bounded subprocesses whose
stdout events are collected by a reader thread; the command lines of the task-aware
Node hosts (the MCP Inspector CLI, ``interop/tasks-host.mjs``); the ``longcall serve``
command; and ``longcall`` invocations as separate processes on a temporary ledger named
by ``LONGCALL_LEDGER``. Everything listens on 127.0.0.1 and every process is killed at
teardown. Must not: decide anything a test asserts.
"""

from __future__ import annotations

import contextlib
import json
import os
import queue
import re
import sqlite3
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

import pytest
from tests.bounds import LOADED_MACHINE_S

ROOT = Path(__file__).resolve().parents[2]
INTEROP = ROOT / "interop"
NODE_BIN = INTEROP / "node_modules" / ".bin"
NODE_COMPILE_CACHE = INTEROP / "node_modules" / ".cache" / "node-compile"
"""Node's on-disk compile cache (made by Node as needed, gone with ``make clean``)."""
NODE = NODE_BIN / "node"
TASK_PEER = INTEROP / "task-peer.mjs"
TASKS_HOST = INTEROP / "tasks-host.mjs"
"""A task-aware host on the TypeScript SDK 2.x client and ext-tasks (both task versions)."""
INSPECTOR = INTEROP / "node_modules/@modelcontextprotocol/inspector/clients/launcher/build/index.js"
"""The MCP Inspector's launcher; ``--cli`` runs its command-line client."""
LOOPBACK_ONLY = INTEROP / "loopback-only.mjs"

START_LIMIT_S = LOADED_MACHINE_S
PY_START_LIMIT_S = LOADED_MACHINE_S
"""A Python peer imports its whole SDK first: on a loaded machine that takes a while."""
EVENT_LIMIT_S = LOADED_MACHINE_S
CLI_LIMIT_S = LOADED_MACHINE_S
STOP_LIMIT_S = 5.0
PEER_LIFETIME_S = 3600
"""The peer exits by itself after this, whatever happens to this process (it also exits
when its stdin closes). A peer lives for its whole test module, which on a loaded
machine took longer than 5 minutes: a shorter lifetime killed it mid-module, and every
later test of the module met a peer that had gone."""


def node_or_fail() -> Path:
    """The Node 22 binary of ``make interop``; a missing peer fails the run (never a skip:
    a peer we cannot run is a gap to see, not a pass)."""
    if not NODE.exists():
        pytest.fail(f"the interop peers are not installed ({NODE} is missing): run `make interop`")
    return NODE


def node_env() -> dict[str, str]:
    """The environment for Node tools: Node 22 first on PATH, so that whatever they start
    by name (``#!/usr/bin/env node``) never finds an older system Node; and Node's
    compile cache beside the packages, so that the hundreds of Node processes a run
    starts compile the suite's and the SDKs' modules once, not each time."""
    return {
        **os.environ,
        "PATH": f"{NODE_BIN}{os.pathsep}{os.environ.get('PATH', '')}",
        "NODE_COMPILE_CACHE": str(NODE_COMPILE_CACHE),
    }


def stop(process: subprocess.Popen[Any]) -> None:
    """Terminate a child we started (bounded), then kill it."""
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(timeout=STOP_LIMIT_S)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
    for stream in (process.stdin, process.stdout, process.stderr):
        if stream is not None:
            stream.close()


def inspector_argv(url: str, era: str, tool: str, arguments: dict[str, Any]) -> list[str]:
    """The MCP Inspector CLI calling ``tool`` at ``url`` in protocol era ``era``
    (``legacy``: 2025-11-25, ``modern``: 2026-07-28); it prints one JSON line, the result
    on stdout or the error on stderr."""
    return [
        str(node_or_fail()),
        str(INSPECTOR),
        "--cli",
        url,
        "--protocol-era",
        era,
        "--method",
        "tools/call",
        "--tool-name",
        tool,
        "--tool-args-json",
        json.dumps(arguments),
        "--format",
        "json",
    ]


def inspector_env(home: Path) -> dict[str, str]:
    """The Inspector's environment: its catalog and stored settings under ``home`` (never
    the user's), and any Node server socket it might open (an OAuth callback) on
    127.0.0.1."""
    return {
        **node_env(),
        "HOME": str(home),
        "MCP_CATALOG_PATH": str(home / "mcp.json"),
        "MCP_CLIENT_CONFIG_PATH": str(home / "client.json"),
        "NODE_OPTIONS": f"--import={LOOPBACK_ONLY}",
    }


def tasks_host_argv(url: str, tool: str, arguments: dict[str, Any], *flags: str) -> list[str]:
    """``interop/tasks-host.mjs`` calling ``tool`` as a task (flags: ``--era``,
    ``--answer``, ``--cancel-on``); it prints one JSON line per step."""
    return [str(node_or_fail()), str(TASKS_HOST), url, tool, json.dumps(arguments), *flags]


# --- the TypeScript SDK task peer ---------------------------------------------------------


@dataclass
class TsPeer:
    """A running peer (``task-peer.mjs`` or a Python peer): its URL and the JSON events
    it printed so far."""

    process: subprocess.Popen[str]
    stderr_path: Path
    url: str = ""
    events: list[dict[str, Any]] = field(default_factory=list)
    changed: threading.Condition = field(default_factory=threading.Condition)

    def _read(self, stdout: IO[str]) -> None:
        for line in stdout:
            try:
                event = json.loads(line)
            except ValueError:
                continue
            with self.changed:
                self.events.append(event)
                self.changed.notify_all()
        with self.changed:
            self.changed.notify_all()

    def wait_for(
        self,
        predicate: Callable[[dict[str, Any]], bool],
        limit_s: float = EVENT_LIMIT_S,
        *,
        since: int = 0,
    ) -> dict[str, Any]:
        """The first event (from position ``since``, a :meth:`mark`) satisfying
        ``predicate``, waiting (bounded) on the reader thread."""
        deadline = time.monotonic() + limit_s
        with self.changed:
            while True:
                found = next((e for e in self.events[since:] if predicate(e)), None)
                if found is not None:
                    return found
                left = deadline - time.monotonic()
                if left <= 0 or self.process.poll() is not None:
                    pytest.fail(f"the peer never reported the event:\n{self.log()}")
                self.changed.wait(left)

    def open_gate(self, name: str) -> None:
        """Let every task waiting on gate ``name`` finish (a command on the peer's stdin);
        returns once the peer says the gate is open."""
        assert self.process.stdin is not None
        self.process.stdin.write(json.dumps({"open": name}) + "\n")
        self.process.stdin.flush()
        self.wait_for(lambda e: e.get("event") == "gate-opened" and e.get("gate") == name)

    def executions(self, tag: str) -> list[dict[str, Any]]:
        """Every task execution the peer started for calls tagged ``tag``."""
        with self.changed:
            return [e for e in self.events if e.get("event") == "started" and e.get("tag") == tag]

    def task_events(self, task_id: str) -> list[str]:
        with self.changed:
            return [str(e["event"]) for e in self.events if e.get("taskId") == task_id]

    def mark(self) -> int:
        """A position in the event log, for :meth:`exchanges_since`."""
        with self.changed:
            return len(self.events)

    def exchanges_since(self, mark: int) -> list[dict[str, Any]]:
        """The peer's trace of the HTTP exchanges it served after ``mark``."""
        with self.changed:
            return [e for e in self.events[mark:] if e.get("event") == "http"]

    def log(self, last: int = 30) -> str:
        """The peer's recent events (HTTP exchanges one line each) and its stderr, for a
        failure message."""
        with self.changed:
            lines = [describe(e) for e in self.events[-last:]]
        stderr = self.stderr_path.read_text(errors="replace")[-2000:]
        return "\n".join(lines) + ("\nstderr:\n" + stderr if stderr else "")


def describe(event: dict[str, Any]) -> str:
    """One peer event as a line: ``POST tasks/result -> 406 application/json (accept: …)``."""
    if event.get("event") != "http":
        return json.dumps(event, sort_keys=True)
    session = str(event.get("session") or "-")[:8]
    path = f" {event['path']}" if event.get("path") else ""
    issued = f"; issued: {str(event['issued'])[:8]}" if event.get("issued") else ""
    return (
        f"{event.get('verb')}{path} {event.get('rpc')} -> {event.get('status')} "
        f"{event.get('contentType')} (accept: {event.get('accept')}; session: {session}{issued})"
    )


@contextlib.contextmanager
def ts_peer(tmp: Path, *flags: str) -> Iterator[TsPeer]:
    """Start ``task-peer.mjs`` with ``flags`` on a free 127.0.0.1 port; stop it at exit.
    Its stdin stays an open pipe: the peer exits by itself when this process dies."""
    node = node_or_fail()
    stderr_path = tmp / "peer.stderr"
    with stderr_path.open("w") as stderr:
        bounded = ("--exit-with-stdin", "--max-lifetime-s", str(PEER_LIFETIME_S))
        process = subprocess.Popen(
            [str(node), str(TASK_PEER), "--port", "0", *bounded, *flags],
            cwd=INTEROP,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=stderr,
            text=True,
        )
    peer = TsPeer(process=process, stderr_path=stderr_path)
    assert process.stdout is not None
    reader = threading.Thread(target=peer._read, args=(process.stdout,), daemon=True)
    reader.start()
    try:
        ready = peer.wait_for(lambda e: e.get("ready") is True, START_LIMIT_S)
        peer.url = str(ready["url"])
        yield peer
    finally:
        stop(process)
        reader.join(STOP_LIMIT_S)


# --- the Python peers (each in its own venv) --------------------------------------------


def py_peer_python(name: str) -> Path:
    """The interpreter of ``interop/NAME/.venv``; a missing venv fails the run (never a
    skip: run `make interop`)."""
    python = INTEROP / name / ".venv" / "bin" / "python"
    if not python.exists():
        pytest.fail(f"the interop peer {name} is not installed ({python} is missing): make interop")
    return python


@contextlib.contextmanager
def py_peer(tmp: Path, name: str, *flags: str) -> Iterator[TsPeer]:
    """Start ``interop/NAME/peer.py`` with ``flags`` in its venv on a free 127.0.0.1
    port; stop it at exit. Its stdin stays an open pipe: the peer exits by itself when
    this process dies."""
    python = py_peer_python(name)
    stderr_path = tmp / "peer.stderr"
    with stderr_path.open("w") as stderr:
        bounded = ("--exit-with-stdin", "--max-lifetime-s", str(PEER_LIFETIME_S))
        process = subprocess.Popen(
            [str(python), str(INTEROP / name / "peer.py"), *bounded, *flags],
            cwd=INTEROP / name,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=stderr,
            text=True,
            env={**os.environ, "PYTHONWARNINGS": "ignore::DeprecationWarning"},
        )
    peer = TsPeer(process=process, stderr_path=stderr_path)
    assert process.stdout is not None
    reader = threading.Thread(target=peer._read, args=(process.stdout,), daemon=True)
    reader.start()
    try:
        ready = peer.wait_for(lambda e: e.get("ready") is True, PY_START_LIMIT_S)
        peer.url = str(ready["url"])
        yield peer
    finally:
        stop(process)
        reader.join(STOP_LIMIT_S)


# --- the `longcall serve` command ----------------------------------------------------

SERVE_START_S = LOADED_MACHINE_S
"""`longcall serve` imports the server library first: seconds on a loaded machine."""
SERVING = re.compile(r"serving MCP at (http://\S+/mcp)")


@dataclass(frozen=True)
class Serve:
    """A running `longcall serve` and its task store file."""

    url: str
    store: Path

    @property
    def apify_url(self) -> str:
        return self.url.removesuffix("/mcp") + "/apify/mcp"

    def tasks(self, tool: str, protocol: str) -> int:
        """How many tasks of ``tool`` in ``protocol`` the server created."""
        with sqlite3.connect(f"file:{self.store}?mode=ro", uri=True) as db:
            row = db.execute(
                "SELECT count(*) FROM tasks WHERE tool_name = ? AND protocol = ?",
                (tool, protocol),
            ).fetchone()
        return int(row[0])


def announced(process: subprocess.Popen[str], pattern: re.Pattern[str], limit_s: float) -> str:
    """The first match of ``pattern`` in the process's stdout, read (bounded) on a thread."""
    lines: queue.Queue[str] = queue.Queue()

    def read() -> None:  # to the end: a pipe left unread would block the process
        assert process.stdout is not None
        for line in process.stdout:
            lines.put(line)

    threading.Thread(target=read, daemon=True).start()
    while True:
        try:
            line = lines.get(timeout=limit_s)
        except queue.Empty:
            pytest.fail(f"the process never announced {pattern.pattern!r}")
        found = pattern.search(line)
        if found:
            return found.group(1)


@contextlib.contextmanager
def serve_process(workdir: Path) -> Iterator[Serve]:
    """The `longcall serve` command on a free 127.0.0.1 port and a task store in
    ``workdir``; stopped at exit."""
    store = workdir / "tasks.db"
    process = subprocess.Popen(
        [sys.executable, "-m", "longcall", "serve", "--port", "0", "--store", f"sqlite:///{store}"],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    try:
        yield Serve(url=announced(process, SERVING, SERVE_START_S), store=store)
    finally:
        stop(process)


# --- the longcall CLI ---------------------------------------------------------------------


@dataclass(frozen=True)
class Caller:
    """``longcall`` as separate processes on one temporary ledger (``LONGCALL_LEDGER``)."""

    ledger_url: str

    def env(self) -> dict[str, str]:
        return {**os.environ, "LONGCALL_LEDGER": self.ledger_url}

    def argv(self, *args: str) -> list[str]:
        return [sys.executable, "-m", "longcall", *args]

    def run(self, *args: str, limit_s: float = CLI_LIMIT_S) -> subprocess.CompletedProcess[str]:
        """Run one command to its end (killed past ``limit_s``)."""
        return subprocess.run(
            self.argv(*args), env=self.env(), capture_output=True, text=True, timeout=limit_s
        )

    def start(self, *args: str) -> subprocess.Popen[str]:
        """Start one command in the background (the caller stops it with :func:`stop`)."""
        return subprocess.Popen(
            self.argv(*args),
            env=self.env(),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )

    def call(
        self, url: str, tool: str, arguments: dict[str, Any], node: str, *more: str
    ) -> tuple[int, dict[str, Any], str]:
        """``longcall call URL TOOL --args … --node … --json`` and its receipt view."""
        done = self.run(*call_args(url, tool, arguments, node, *more))
        return done.returncode, view_of(done.stdout, done.stderr), done.stderr

    def show(self, node: str) -> dict[str, Any]:
        done = self.run("ops", "show", node, "--json")
        return view_of(done.stdout, done.stderr)


def call_args(url: str, tool: str, arguments: dict[str, Any], node: str, *more: str) -> list[str]:
    return ["call", url, tool, "--args", json.dumps(arguments), "--node", node, "--json", *more]


def view_of(stdout: str, stderr: str) -> dict[str, Any]:
    """The JSON a ``--json`` command printed (a test failure quoting stderr otherwise)."""
    try:
        view = json.loads(stdout)
    except ValueError:
        view = None
    # An assertion (not a harness error): a refusal instead of a receipt is the caller's
    # outcome, which a test may expect to fail today.
    assert isinstance(view, dict), (
        f"longcall printed no receipt view.\nstdout: {stdout[-2000:]}\nstderr: {stderr[-2000:]}"
    )
    return view


def finish(process: subprocess.Popen[str], limit_s: float = CLI_LIMIT_S) -> tuple[int, str, str]:
    """Wait (bounded) for a background command; its exit code, stdout and stderr."""
    try:
        out, err = process.communicate(timeout=limit_s)
    except subprocess.TimeoutExpired:
        stop(process)
        pytest.fail(f"longcall did not finish within {limit_s:g} s")
    return process.returncode, out, err
