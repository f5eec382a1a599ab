"""``make demo``: the main job, end to end, on the embedded SQLite default.

It starts the reference server (``longcall serve``'s tools, a durable task store) on a
free 127.0.0.1 port and runs durable calls through the executor with a SQLite ledger,
live: a report with progress, a crawl that succeeds with zero items (a warning), an
approval answered by a policy, a call cancelled mid-flight, a call whose create
response the server drops (submission unknown → resolved by its key), and then a
batch driven by a ``longcall worker`` process that is SIGKILLed halfway and restarted.
It ends with the receipts table and checks what it promised: one receipt per call
node, one server task per call node. Exit 0 only when all of that holds.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import socket
import sqlite3
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.live import Live
from rich.table import Table

from longcall.core import OperationRecord, State
from longcall.core.commands import AskInput
from longcall.ledger import Ledger, SQLiteLedger
from longcall.runtime.engine import CallSpec
from longcall.runtime.executor import Executor

SERVER_START_TIMEOUT_S = 30.0
PHASE_TIMEOUT_S = 90.0
WORKER_BATCH = 8
DROPPED_CREATE = 5
"""The server drops the HTTP response of its 5th create: the 5th call below."""


def approve_everything(record: OperationRecord, ask: AskInput) -> Mapping[str, Any]:
    """The demo's approval policy (X4): accept every form with approved = true."""
    return {key: {"action": "accept", "content": {"approved": True}} for key in ask.keys}


def run_demo(ledger_url: str | None = None, console: Console | None = None) -> int:
    console = console or Console()
    with tempfile.TemporaryDirectory(prefix="longcall-demo-") as tmp:
        work = Path(tmp)
        port = _free_port()
        with _reference_server(work, port, console) as url:
            ledger_path = work / "ledger.db"
            with SQLiteLedger(ledger_path) as ledger:
                ok = asyncio.run(_phase_one(ledger, url, console))
            ok = _phase_two(ledger_path, url, console) and ok
            with SQLiteLedger(ledger_path) as ledger:
                console.print(_receipts_table(ledger))
                ok = _audit(ledger, work / "tasks.db", console) and ok
    console.print("[bold green]demo: every promise held[/]" if ok else "[bold red]demo: FAILED[/]")
    return 0 if ok else 1


# --- phase one: five calls in this process ---------------------------------------------


async def _phase_one(ledger: Ledger, url: str, console: Console) -> bool:
    console.rule("[bold]1. five durable calls, live")
    executor = Executor(ledger, input_policy=approve_everything)
    progress: dict[str, str] = {}
    executor.on_progress = lambda node, fraction, message: progress.__setitem__(
        node, message or (f"{fraction:.0%}" if fraction is not None else "")
    )
    calls: list[tuple[str, str, dict[str, Any]]] = [
        ("report", "sleep_report", {"seconds": 5, "rows": 3}),
        ("empty-crawl", "crawl", {"pages": 0, "items_per_page": 10}),
        ("approval", "approve", {"change": "rotate the signing keys"}),
        ("to-cancel", "sleep_report", {"seconds": 300, "rows": 1}),
        ("lost-create", "crawl", {"pages": 3, "items_per_page": 2}),
    ]
    stop = asyncio.Event()
    runner = asyncio.create_task(executor.run(stop=stop))
    try:
        for node, tool, arguments in calls:
            binding = await executor.bind(url, tool)
            executor.call(CallSpec(call_node_id=node, binding=binding, arguments=arguments))
            # The server loses the response of its 5th creation: each call is submitted
            # before the next is made, so that one is "lost-create" whatever the scheduling.
            async with asyncio.timeout(PHASE_TIMEOUT_S):
                await executor.wait_for(node, lambda r: r.state is not State.SUBMITTING)
        with Live(_live_table(ledger, progress), console=console, refresh_per_second=4) as live:
            async with asyncio.timeout(PHASE_TIMEOUT_S):
                await executor.wait_for("to-cancel", lambda r: r.state is State.WORKING)
                outcome = executor.cancel("to-cancel")
                progress["to-cancel"] = (
                    f"cancel {outcome.outcome} (generation {outcome.cancel_generation})"
                )
                while not all(_settled(ledger.get(node)) for node, _, _ in calls):
                    live.update(_live_table(ledger, progress))
                    await asyncio.sleep(0.25)
                live.update(_live_table(ledger, progress))
    finally:
        stop.set()
        await runner
        await executor.aclose()
    expected = {
        "report": State.ACCEPTED,
        "empty-crawl": State.ACCEPTED,
        "approval": State.ACCEPTED,
        "to-cancel": State.CANCELLED_ACCEPTED,
        "lost-create": State.ACCEPTED,
    }
    ok = all(ledger.get(node).state is state for node, state in expected.items())
    ok = ok and "empty_result" in ledger.get("empty-crawl").warnings
    lost = [h.event for h in ledger.history("lost-create")]
    ok = ok and "SubmitOutcomeLost" in lost and "SubmissionFound" in lost
    console.print(f"\nlost-create timeline: {' → '.join(lost)}")
    return ok


# --- phase two: a worker process killed halfway and restarted ----------------------------


def _phase_two(ledger_path: Path, url: str, console: Console) -> bool:
    console.rule(f"[bold]2. {WORKER_BATCH} calls, a worker SIGKILLed halfway, then restarted")
    ledger_url = f"sqlite:///{ledger_path}"
    asyncio.run(_record_batch(ledger_path, url))
    first = _start_worker(ledger_url)
    try:
        _wait(lambda: _count(ledger_path, State.WORKING) >= WORKER_BATCH // 2, PHASE_TIMEOUT_S)
    finally:
        first.send_signal(signal.SIGKILL)
        first.wait(timeout=30)
    with SQLiteLedger(ledger_path) as ledger:
        states = sorted(
            r.state.value for r in ledger.list_by_state() if r.call_node_id.startswith("batch-")
        )
    console.print(f"worker killed (exit {first.returncode}); batch states: {', '.join(states)}")
    second = _start_worker(ledger_url, until_idle=True)
    try:
        second.wait(timeout=PHASE_TIMEOUT_S)
    finally:
        if second.poll() is None:
            second.kill()
    console.print(f"restarted worker finished (exit {second.returncode})")
    with SQLiteLedger(ledger_path) as ledger:
        batch = [r for r in ledger.list_by_state() if r.call_node_id.startswith("batch-")]
        return second.returncode == 0 and all(r.state is State.ACCEPTED for r in batch)


async def _record_batch(ledger_path: Path, url: str) -> None:
    """Record the batch's calls durably without sending anything: the worker sends."""
    with SQLiteLedger(ledger_path) as ledger:
        executor = Executor(ledger)
        try:
            binding = await executor.bind(url, "sleep_report")
            for i in range(WORKER_BATCH):
                arguments = {"seconds": 2 + i % 3, "rows": i}
                executor.call(
                    CallSpec(call_node_id=f"batch-{i}", binding=binding, arguments=arguments)
                )
        finally:
            await executor.aclose()


def _start_worker(ledger_url: str, *, until_idle: bool = False) -> subprocess.Popen[bytes]:
    command = [sys.executable, "-m", "longcall", "worker", "--ledger", ledger_url]
    if until_idle:
        command.append("--until-idle")
    return subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def _count(ledger_path: Path, state: State) -> int:
    with SQLiteLedger(ledger_path) as ledger:
        return sum(1 for r in ledger.list_by_state(state) if r.call_node_id.startswith("batch-"))


# --- the audit -------------------------------------------------------------------------


def _audit(ledger: Ledger, task_store: Path, console: Console) -> bool:
    """One receipt and one outbox row per call node; one server task per call node."""
    records = ledger.list_by_state()
    receipts = {r.call_node_id for r in ledger.receipts()}
    outbox = [row.call_node_id for row in ledger.outbox()]
    keys = {r.submission_key for r in records}
    with contextlib.closing(sqlite3.connect(f"file:{task_store}?mode=ro", uri=True)) as db:
        tasks = db.execute("SELECT submission_key FROM tasks").fetchall()
    ours = [key for (key,) in tasks if key in keys]
    checks = {
        "one receipt per call node": receipts == {r.call_node_id for r in records},
        "one outbox row per receipt": sorted(outbox) == sorted(receipts),
        "one server task per call node": len(ours) == len(set(ours)) == len(records)
        and len(tasks) == len(records),
    }
    for name, held in checks.items():
        console.print(f"{'✓' if held else '✗'} {name}")
    return all(checks.values())


# --- display ---------------------------------------------------------------------------


def _settled(record: OperationRecord) -> bool:
    return record.is_terminal or record.state is State.RECONCILIATION_REQUIRED


def _live_table(ledger: Ledger, progress: Mapping[str, str]) -> Table:
    table = Table(title="operations", title_justify="left")
    for column in ("call node", "tool", "state", "server status", "progress / note"):
        table.add_column(column)
    for record in ledger.list_by_state():
        if record.call_node_id.startswith("batch-"):
            continue
        note = progress.get(record.call_node_id, "")
        if record.warnings:
            note = ", ".join(record.warnings)
        table.add_row(
            record.call_node_id,
            record.tool_name,
            record.state.value,
            record.server_status_raw or "-",
            note,
        )
    return table


def _receipts_table(ledger: Ledger) -> Table:
    table = Table(title="terminal receipts", title_justify="left")
    for column in ("call node", "status", "kind", "protocol", "epoch", "cancel gen", "warnings"):
        table.add_column(column)
    protocols = {
        r.call_node_id: r.protocol.removeprefix("mcp_tasks_") for r in ledger.list_by_state()
    }
    for receipt in ledger.receipts():
        table.add_row(
            receipt.call_node_id,
            receipt.terminal_status.value,
            receipt.result_kind.value,
            protocols.get(receipt.call_node_id, "?"),
            str(receipt.execution_epoch),
            str(receipt.cancel_generation),
            ", ".join(receipt.warnings),
        )
    return table


# --- the server ------------------------------------------------------------------------


@contextlib.contextmanager
def _reference_server(work: Path, port: int, console: Console) -> Iterator[str]:
    command = [
        sys.executable, "-m", "longcall.server",
        "--store", f"sqlite:///{work / 'tasks.db'}",
        "--host", "127.0.0.1", "--port", str(port),
        "--drop-create-response-at", str(DROPPED_CREATE),
    ]  # fmt: skip
    log = (work / "server.log").open("wb")
    process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, env=os.environ.copy())
    try:
        _wait(lambda: _port_open(port) or process.poll() is not None, SERVER_START_TIMEOUT_S)
        if process.poll() is not None:
            raise RuntimeError(
                f"the reference server did not start: {(work / 'server.log').read_text()}"
            )
        url = f"http://127.0.0.1:{port}/mcp"
        console.print(f"reference server at {url} (task store {work / 'tasks.db'})")
        yield url
    finally:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
        log.close()


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _port_open(port: int) -> bool:
    with socket.socket() as sock:
        sock.settimeout(0.2)
        return sock.connect_ex(("127.0.0.1", port)) == 0


def _wait(condition: Any, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            raise TimeoutError(f"gave up after {timeout_s:.0f} s")
        time.sleep(0.1)
