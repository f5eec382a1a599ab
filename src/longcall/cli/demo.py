"""``longcall demo`` (``make demo``): the main job, end to end, on the embedded SQLite
default.

It starts the reference server (a durable task store) on a free 127.0.0.1 port and
makes durable calls through :class:`longcall.Client` with a SQLite ledger, live: a
report with progress, a crawl that succeeds with zero items (a warning), an approval
answered by an input callback, a call cancelled mid-flight, and a call whose create
response is lost on the way back (the server drops the response of exactly that call:
submission unknown → resolved by its key). Then a batch is driven by a ``longcall
worker`` process that is SIGKILLed halfway and restarted. It ends with the receipts
table and checks what it promised — one receipt per call node, one server task per
call node — printing each check with why it failed. Exit 0 only when all of them hold.

``longcall demo --walkthrough`` is the offline part: the scripted operations of
:mod:`longcall.testing.scripted` through the real core and a SQLite ledger, each
operation's timeline and the receipts.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import os
import signal
import socket
import sqlite3
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import click
from rich.console import Console
from rich.live import Live
from rich.markup import escape
from rich.table import Table

from longcall.client import Client, InputRequest, Progress
from longcall.core import OperationRecord, State
from longcall.ledger import Ledger, SQLiteLedger, open_ledger
from longcall.testing import scripted


@click.command()
@click.option(
    "--walkthrough",
    is_flag=True,
    help="Only the offline walkthrough: three scripted operations through core + ledger.",
)
def demo(walkthrough: bool) -> None:
    """The main job end to end: reference server, executor, SQLite ledger, faults.

    \b
    Examples:
      longcall demo
      longcall demo --walkthrough
    """
    raise SystemExit(run_walkthrough() if walkthrough else run_demo())


SERVER_START_TIMEOUT_S = 30.0
PHASE_TIMEOUT_S = 90.0
WORKER_BATCH = 8
LOST_CREATE = ("lost-create", "crawl", {"pages": 3, "items_per_page": 2})
"""The call whose create response the server loses (matched by tool and arguments)."""
CALLS: tuple[tuple[str, str, dict[str, Any]], ...] = (
    ("report", "sleep_report", {"seconds": 5, "rows": 3}),
    ("empty-crawl", "crawl", {"pages": 0, "items_per_page": 10}),
    ("approval", "approve", {"change": "rotate the signing keys"}),
    ("to-cancel", "sleep_report", {"seconds": 300, "rows": 1}),
    LOST_CREATE,
)


@dataclasses.dataclass(frozen=True, slots=True)
class Check:
    """One promise the demo checks, and why it failed if it did."""

    name: str
    held: bool
    why: str = ""


async def approve_everything(request: InputRequest) -> Mapping[str, Any]:
    """The demo's input callback: accept every form with approved = true."""
    return request.accept(approved=True)


def run_demo(console: Console | None = None) -> int:
    console = console or Console()
    checks: list[Check] = []
    with tempfile.TemporaryDirectory(prefix="longcall-demo-") as tmp:
        work = Path(tmp)
        try:
            with _reference_server(work, _free_port(), console) as url:
                ledger_url = f"sqlite:///{work / 'ledger.db'}"
                checks += asyncio.run(_phase_one(ledger_url, url, console))
                checks += _phase_two(work / "ledger.db", url, console)
                with SQLiteLedger(work / "ledger.db") as ledger:
                    console.print(_receipts_table(ledger))
                    checks += _audit(ledger, work / "tasks.db")
        except (OSError, RuntimeError, TimeoutError) as exc:
            checks.append(Check("the demo ran to its end", False, f"{type(exc).__name__}: {exc}"))
    return report(checks, console)


def report(checks: list[Check], console: Console) -> int:
    """Print every check (a failed one with why) and the verdict; 0 when all held."""
    for check in checks:
        mark = "[green]✓[/]" if check.held else "[red]✗[/]"
        why = f" — {escape(check.why)}" if check.why and not check.held else ""
        console.print(f"{mark} {escape(check.name)}{why}")
    failed = [c for c in checks if not c.held]
    if failed:
        console.print(f"[bold red]demo: FAILED[/] ({len(failed)} of {len(checks)} checks)")
        return 1
    console.print("[bold green]demo: every promise held[/]")
    return 0


# --- phase one: five calls in this process ---------------------------------------------


async def _phase_one(ledger_url: str, url: str, console: Console) -> list[Check]:
    console.rule("[bold]1. five durable calls, live")
    notes: dict[str, str] = {}

    def on_progress(report: Progress) -> None:
        if report.server_unreachable:
            notes[report.call_node_id] = "server unreachable, retrying"
        elif report.fraction is not None:
            notes[report.call_node_id] = f"{report.fraction:.0%} {report.message or ''}"
        elif report.message:
            notes[report.call_node_id] = report.message

    nodes = [node for node, _, _ in CALLS]
    async with Client(ledger_url, on_input=approve_everything, on_progress=on_progress) as client:
        for node, tool, arguments in CALLS:
            await client.call(url, tool, arguments, node=node, wait=False)
        cancel = await client.cancel("to-cancel")
        notes["to-cancel"] = f"cancel {cancel.outcome} (generation {cancel.cancel_generation})"
        waits = asyncio.gather(*(client.wait(node) for node in nodes))
        with Live(_live_table(client.ledger, notes), console=console, refresh_per_second=4) as live:
            try:
                async with asyncio.timeout(PHASE_TIMEOUT_S):
                    while not waits.done():
                        live.update(_live_table(client.ledger, notes))
                        await asyncio.wait({waits}, timeout=0.25)
            except TimeoutError:
                waits.cancel()
            live.update(_live_table(client.ledger, notes))
        records = {node: client.ledger.get(node) for node in nodes}
        lost = [h.event for h in client.ledger.history("lost-create")]
    console.print(f"\nlost-create timeline: {' → '.join(lost)}")
    expected = {
        "report": State.ACCEPTED,
        "empty-crawl": State.ACCEPTED,
        "approval": State.ACCEPTED,
        "to-cancel": State.CANCELLED_ACCEPTED,
        "lost-create": State.ACCEPTED,
    }
    checks = [
        Check(
            f"{node} ends {state.value}",
            records[node].state is state,
            f"it is {records[node].state.value}{_why(records[node])}",
        )
        for node, state in expected.items()
    ]
    empty = records["empty-crawl"]
    checks.append(
        Check(
            "a zero-item success carries the empty_result warning",
            "empty_result" in empty.warnings,
            f"warnings: {list(empty.warnings)}",
        )
    )
    checks.append(
        Check(
            "the lost create was resolved by its submission key, not sent again",
            "SubmitOutcomeLost" in lost and "SubmissionFound" in lost,
            f"its timeline: {' → '.join(lost)}",
        )
    )
    return checks


def _why(record: OperationRecord) -> str:
    reason = record.reconciliation_reason or record.last_error
    return f" ({reason})" if reason else ""


# --- phase two: a worker process killed halfway and restarted ----------------------------


def _phase_two(ledger_path: Path, url: str, console: Console) -> list[Check]:
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
        states = sorted(r.state.value for r in _batch(ledger))
    console.print(f"worker killed (exit {first.returncode}); batch states: {', '.join(states)}")
    second = _start_worker(ledger_url, until_idle=True)
    try:
        second.wait(timeout=PHASE_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        second.kill()
        second.wait(timeout=30)
    console.print(f"restarted worker finished (exit {second.returncode})")
    with SQLiteLedger(ledger_path) as ledger:
        open_ = [f"{r.call_node_id} is {r.state.value}{_why(r)}" for r in _batch(ledger)
                 if r.state is not State.ACCEPTED]  # fmt: skip
    return [
        Check(
            "the restarted worker drove the batch and exited 0",
            second.returncode == 0,
            f"it exited {second.returncode}",
        ),
        Check(f"all {WORKER_BATCH} batch calls accepted", not open_, "; ".join(open_)),
    ]


async def _record_batch(ledger_path: Path, url: str) -> None:
    """Record the batch's calls durably without sending anything: the worker sends."""
    from longcall.runtime.engine import CallSpec
    from longcall.runtime.executor import Executor

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
    command = [sys.executable, "-m", "longcall", "worker", "--quiet", "--ledger", ledger_url]
    if until_idle:
        command.append("--until-idle")
    return subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def _batch(ledger: Ledger) -> list[OperationRecord]:
    return [r for r in ledger.list_by_state() if r.call_node_id.startswith("batch-")]


def _count(ledger_path: Path, state: State) -> int:
    with SQLiteLedger(ledger_path) as ledger:
        return sum(1 for r in _batch(ledger) if r.state is state)


# --- the audit -------------------------------------------------------------------------


def _audit(ledger: Ledger, task_store: Path) -> list[Check]:
    """One receipt and one outbox row per call node; one server task per call node."""
    records = ledger.list_by_state()
    nodes = {r.call_node_id for r in records}
    receipts = {r.call_node_id for r in ledger.receipts()}
    outbox = [row.call_node_id for row in ledger.outbox()]
    keys = {r.submission_key for r in records}
    with contextlib.closing(sqlite3.connect(f"file:{task_store}?mode=ro", uri=True)) as db:
        tasks = [key for (key,) in db.execute("SELECT submission_key FROM tasks")]
    ours = [key for key in tasks if key in keys]
    twice = sorted({key for key in ours if ours.count(key) > 1})
    return [
        Check(
            "one receipt per call node",
            receipts == nodes,
            f"without a receipt: {sorted(nodes - receipts)}",
        ),
        Check(
            "one outbox row per receipt",
            sorted(outbox) == sorted(receipts),
            f"{len(outbox)} outbox rows for {len(receipts)} receipts",
        ),
        Check(
            "one server task per call node",
            len(ours) == len(set(ours)) == len(records) and len(tasks) == len(records),
            f"{len(tasks)} server tasks for {len(records)} call nodes"
            + (f"; created twice: {twice}" if twice else ""),
        ),
    ]


# --- display ---------------------------------------------------------------------------


def _live_table(ledger: Ledger, notes: Mapping[str, str]) -> Table:
    table = Table(title="operations", title_justify="left")
    for column in ("call node", "tool", "state", "server status", "progress / note"):
        table.add_column(column)
    for record in ledger.list_by_state():
        if record.call_node_id.startswith("batch-"):
            continue
        note = notes.get(record.call_node_id, "")
        if record.warnings:
            note = ", ".join(record.warnings)
        table.add_row(
            record.call_node_id,
            record.tool_name,
            record.state.value,
            record.server_status_raw or "-",
            escape(note),
        )
    return table


def _receipts_table(ledger: Ledger) -> Table:
    table = Table(title="terminal receipts", title_justify="left")
    for column in ("call node", "status", "kind", "protocol", "epoch", "cancel gen", "warnings"):
        table.add_column(column)
    protocols = {r.call_node_id: r.protocol for r in ledger.list_by_state()}
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
    _node, tool, arguments = LOST_CREATE
    command = [
        sys.executable, "-m", "longcall.testing.server",
        "--store", f"sqlite:///{work / 'tasks.db'}",
        "--host", "127.0.0.1", "--port", str(port),
        "--lose-create", tool, json.dumps(arguments),
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


def _wait(condition: Callable[[], bool], timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            raise TimeoutError(f"gave up after {timeout_s:.0f} s")
        time.sleep(0.1)


# --- longcall demo --walkthrough -----------------------------------------------


def run_walkthrough(ledger_url: str | None = None, console: Console | None = None) -> int:
    console = console or Console()
    with tempfile.TemporaryDirectory(prefix="longcall-demo-") as tmp:
        ledger = open_ledger(ledger_url) if ledger_url else SQLiteLedger(Path(tmp) / "demo.db")
        with ledger:
            console.print(f"[bold]longcall demo[/] — ledger: {_where(ledger, ledger_url)}\n")
            for index, scenario in enumerate(scripted.SCENARIOS, start=1):
                node = f"demo-{index}-{scenario.name}"
                if ledger.find(node) is None:
                    scripted.start(ledger, node, scenario, now=0.0)
                scripted.drive(ledger, node, scenario, now=0.0)
                console.print(_timeline(ledger, node, scenario))
            console.print(_receipts(ledger))
            pending = ledger.outbox_pending()
            console.print(
                f"{len(pending)} ready-outbox rows, each pointing at its receipt "
                f"({', '.join(f'#{row.receipt_id}' for row in pending)})."
            )
    return 0


def _where(ledger: Ledger, url: str | None) -> str:
    return url or f"{getattr(ledger, 'path', '?')} (temporary SQLite file, WAL)"


def _timeline(ledger: Ledger, node: str, scenario: scripted.Scenario) -> Table:
    table = Table(title=f"{node}: {scenario.tool}({scenario.arguments})", title_justify="left")
    for column in ("v", "t (s)", "event", "state"):
        table.add_column(column)
    for row in ledger.history(node):
        table.add_row(str(row.version), f"{row.at:.1f}", row.event, row.state.value)
    return table


def _receipts(ledger: Ledger) -> Table:
    table = Table(title="terminal receipts", title_justify="left")
    for column in ("call node", "status", "kind", "operation", "epoch", "cancel gen", "digest"):
        table.add_column(column)
    for receipt in ledger.receipts():
        table.add_row(
            receipt.call_node_id,
            receipt.terminal_status.value,
            receipt.result_kind.value,
            receipt.operation_id or "-",
            str(receipt.execution_epoch),
            str(receipt.cancel_generation),
            receipt.result_digest[:19] + "…",
        )
    return table
