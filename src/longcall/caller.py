"""The caller-side commands of ``longcall``: ``call``, ``worker`` and ``ops`` (SPEC O1).

Each command opens the ledger, does one thing, and prints it for people (rich tables
and progress bars) or, with ``--json``, for machines. ``ops cancel`` / ``ops answer``
/ ``ops reconcile`` write through the ledger with compare-and-set; a running worker
notices the change on its next refresh and acts on it.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
import time
from collections.abc import Mapping
from typing import Any

import click
from rich.console import Console
from rich.progress import BarColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn
from rich.table import Table

from longcall.core import (
    LongcallError,
    OperationRecord,
    ResultKind,
    ServerStatus,
    State,
    handle,
)
from longcall.core import events as e
from longcall.core.keys import canonical_json, digest_bytes, request_digest
from longcall.ledger import DEFAULT_LEDGER_URL, Ledger, open_ledger

LEDGER_ENV = "LONGCALL_LEDGER"
EXIT_NOT_ACCEPTED = 2
EXIT_REFUSED = 3

ledger_option = click.option(
    "--ledger",
    "ledger_url",
    default=lambda: os.environ.get(LEDGER_ENV, DEFAULT_LEDGER_URL),
    show_default=f"${LEDGER_ENV} or {DEFAULT_LEDGER_URL}",
    help="Ledger URL (sqlite:///PATH or postgresql://…).",
)
json_option = click.option("--json", "as_json", is_flag=True, help="Print JSON for machines.")


def receipt_view(ledger: Ledger, record: OperationRecord) -> dict[str, Any]:
    """The JSON a caller sees for one call node: its receipt when accepted, its state
    and reason otherwise."""
    receipt = ledger.receipt(record.call_node_id)
    payload = ledger.result_payload(record.call_node_id)
    result: Any = None
    if payload is not None:
        try:
            result = json.loads(payload)
        except ValueError:
            result = payload.decode("utf-8", "replace")
    return {
        "call_node_id": record.call_node_id,
        "state": record.state.value,
        "server_status": record.server_status.value if record.server_status else None,
        "server_status_raw": record.server_status_raw,
        "operation_id": record.operation_id,
        "protocol": record.protocol,
        "tool": record.tool_name,
        "result": result,
        "result_kind": record.result_kind.value if record.result_kind else None,
        "result_digest": receipt.result_digest if receipt else record.result_digest,
        "warnings": list(record.warnings),
        "input_round": record.input_round,
        "input_keys_pending": list(record.input_keys_pending),
        "cancel_generation": record.cancel_generation,
        "execution_epoch": record.execution_epoch,
        "effect_reconciliation_required": record.effect_reconciliation_required,
        "reconciliation_reason": record.reconciliation_reason,
        "resolved_by": record.resolved_by,
        "last_error": record.last_error,
        "receipt": receipt is not None,
    }


def accepted_ok(record: OperationRecord) -> bool:
    """Exit 0 only for an accepted, completed, non-error result."""
    return (
        record.state is State.ACCEPTED
        and record.server_status is ServerStatus.COMPLETED
        and record.result_kind is ResultKind.VALUE
    )


# --- longcall call ---------------------------------------------------------------------


@click.command()
@click.argument("url")
@click.argument("tool")
@click.option("--args", "args_json", default="{}", help="Tool arguments as a JSON object.")
@click.option("--node", "node", default=None, help="Call node id (default: from tool + args).")
@ledger_option
@click.option("--wait", is_flag=True, help="Drive the call to its terminal receipt.")
@json_option
@click.option(
    "--protocol",
    default=None,
    help="aip-151, apify, mcp or an MCP version (default: from the URL, then negotiate).",
)
@click.option("--budget", "budget_s", type=float, default=None, help="Total wait budget (s).")
@click.option("--qps", "qps", type=float, default=20.0, show_default=True, help="Poll QPS cap.")
@click.option(
    "--answer",
    "answers",
    multiple=True,
    help="Answer input automatically: KEY=JSON (repeatable).",
)
def call(
    url: str,
    tool: str,
    args_json: str,
    node: str | None,
    ledger_url: str,
    wait: bool,
    as_json: bool,
    protocol: str | None,
    budget_s: float | None,
    qps: float,
    answers: tuple[str, ...],
) -> None:
    """Submit a durable call of TOOL at URL (attaches if the call node exists)."""
    try:
        arguments = json.loads(args_json)
    except ValueError as exc:
        raise click.BadParameter(f"not JSON: {exc}", param_hint="--args") from exc
    if not isinstance(arguments, dict):
        raise click.BadParameter("must be a JSON object", param_hint="--args")
    auto = _parse_answers(answers)
    node = node or f"{tool}-{request_digest(tool, arguments)[7:23]}"
    console = Console(stderr=True)
    try:
        view = asyncio.run(
            _call(
                url=url,
                tool=tool,
                arguments=arguments,
                node=node,
                ledger_url=ledger_url,
                wait=wait,
                protocol=protocol,
                budget_s=budget_s,
                qps=qps,
                auto=auto,
                console=console,
                quiet=as_json,
            )
        )
    except LongcallError as exc:
        console.print(f"[red]refused:[/] {exc}")
        sys.exit(EXIT_REFUSED)
    _print_view(view, as_json)
    if wait and not view["accepted_ok"]:
        sys.exit(EXIT_NOT_ACCEPTED)


async def _call(
    *,
    url: str,
    tool: str,
    arguments: dict[str, Any],
    node: str,
    ledger_url: str,
    wait: bool,
    protocol: str | None,
    budget_s: float | None,
    qps: float,
    auto: Mapping[str, Any],
    console: Console,
    quiet: bool,
) -> dict[str, Any]:
    from longcall.runtime.engine import CallSpec
    from longcall.runtime.executor import Executor

    with open_ledger(ledger_url) as ledger:
        policy = (
            (lambda record, ask: {k: auto[k] for k in ask.keys if k in auto} or None)
            if auto
            else None
        )
        executor = Executor(
            ledger,
            poll_qps_max=qps,
            input_policy=policy,
            adopt_new=False,
        )
        try:
            record = executor.attach(node, tool, arguments)
            if record is None:
                binding = await executor.bind(url, tool, protocol=protocol)
                spec = CallSpec(
                    call_node_id=node, binding=binding, arguments=arguments, budget_s=budget_s
                )
                record = executor.call(spec)
            if wait and not record.is_terminal:
                record = await _drive_until_terminal(executor, node, console, quiet)
            elif record.state in _SUBMISSION_STATES:
                # Without --wait, send the create and return once the server holds the
                # operation (or it is accepted or escalated); a worker takes it from there.
                await _drive_while_submitting(executor, node)
        finally:
            await executor.aclose()
        view = receipt_view(ledger, ledger.get(node))
        view["accepted_ok"] = accepted_ok(ledger.get(node))
        return view


async def _drive_until_terminal(
    executor: Any, node: str, console: Console, quiet: bool
) -> OperationRecord:
    stop = asyncio.Event()
    runner = asyncio.create_task(executor.run(stop=stop))
    progress = Progress(
        SpinnerColumn(),
        TextColumn("{task.description}"),
        BarColumn(),
        TimeElapsedColumn(),
        console=console,
        disable=quiet or not console.is_terminal,
    )
    with progress:
        task_id = progress.add_task(node, total=None)

        def on_progress(call_node_id: str, fraction: float | None, message: str | None) -> None:
            if call_node_id == node:
                progress.update(
                    task_id,
                    completed=fraction,
                    total=1.0 if fraction is not None else None,
                    description=f"{node}: {message or ''}",
                )

        executor.on_progress = on_progress
        try:
            record: OperationRecord = await executor.wait_terminal(node)
        finally:
            stop.set()
            await runner
    return record


_SUBMISSION_STATES = (State.SUBMITTING, State.SUBMISSION_UNKNOWN, State.NOT_FOUND_SAFE)
SUBMIT_WAIT_S = 120.0


async def _drive_while_submitting(executor: Any, node: str) -> None:
    stop = asyncio.Event()
    runner = asyncio.create_task(executor.run(stop=stop))
    try:
        async with asyncio.timeout(SUBMIT_WAIT_S):
            await executor.wait_for(node, lambda r: r.state not in _SUBMISSION_STATES)
    except TimeoutError:
        pass  # still in doubt: the record is durable and a worker resolves it by key
    finally:
        stop.set()
        await runner


def _parse_answers(answers: tuple[str, ...]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for item in answers:
        key, sep, value = item.partition("=")
        if not sep:
            raise click.BadParameter(f"{item!r}: use KEY=JSON", param_hint="--answer")
        try:
            out[key] = json.loads(value)
        except ValueError as exc:
            raise click.BadParameter(f"{item!r}: {exc}", param_hint="--answer") from exc
    return out


def _print_view(view: dict[str, Any], as_json: bool) -> None:
    if as_json:
        click.echo(json.dumps(view, indent=2, sort_keys=True))
        return
    table = Table(
        title=f"call node {view['call_node_id']}", title_justify="left", show_header=False
    )
    for key in (
        "state",
        "server_status",
        "result_kind",
        "operation_id",
        "protocol",
        "warnings",
        "result_digest",
        "reconciliation_reason",
        "result",
    ):
        value = view.get(key)
        if value not in (None, [], ""):
            table.add_row(key, json.dumps(value) if not isinstance(value, str) else value)
    Console().print(table)


# --- longcall worker -------------------------------------------------------------------


@click.command()
@ledger_option
@click.option(
    "--qps",
    "qps",
    type=float,
    default=20.0,
    show_default=True,
    help="Poll cap per server, shared by every worker of the ledger.",
)
@click.option("--until-idle", is_flag=True, help="Exit once no operation is open.")
@click.option(
    "--disable", "disabled", multiple=True, help="Protocol adapter to disable for new work."
)
@click.option(
    "--lease",
    "lease_s",
    type=click.FloatRange(min=0.5),
    default=30.0,
    show_default=True,
    help="Seconds another worker waits before taking over this one's operations if it stops.",
)
@click.option(
    "--metrics-port",
    type=click.IntRange(min=0, max=65535),
    default=None,
    help="Serve Prometheus metrics at http://127.0.0.1:PORT/metrics (0: any free port).",
)
@click.option("--metrics-host", default="127.0.0.1", show_default=True, help="Metrics interface.")
def worker(
    ledger_url: str,
    qps: float,
    until_idle: bool,
    disabled: tuple[str, ...],
    lease_s: float,
    metrics_port: int | None,
    metrics_host: str,
) -> None:
    """Drive open operations of the ledger; several workers share them through leases."""
    asyncio.run(_worker(ledger_url, qps, until_idle, disabled, lease_s, metrics_port, metrics_host))


async def _worker(
    ledger_url: str,
    qps: float,
    until_idle: bool,
    disabled: tuple[str, ...],
    lease_s: float,
    metrics_port: int | None,
    metrics_host: str,
) -> None:
    from longcall.runtime.engine import LeasePolicy
    from longcall.runtime.executor import Executor

    console = Console(stderr=True)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    with open_ledger(ledger_url) as ledger:
        executor = Executor(
            ledger,
            poll_qps_max=qps,
            disabled_protocols=disabled,
            lease=LeasePolicy.of(lease_s),
        )
        if metrics_port is not None:
            port = executor.metrics.serve(metrics_port, host=metrics_host)
            console.print(f"worker: metrics at http://{metrics_host}:{port}/metrics")
        try:
            resumed = await executor.aresume_all()
            console.print(
                f"worker {executor.owner}: took {resumed} open operations from {ledger_url}"
            )
            await executor.run(stop=stop, until_idle=until_idle)
        finally:
            await executor.aclose()
        console.print("worker: stopped")


# --- longcall ops ----------------------------------------------------------------------


@click.group()
def ops() -> None:
    """Inspect and steer operations in the ledger."""


@ops.command("list")
@ledger_option
@click.option("--state", "states", multiple=True, type=click.Choice([s.value for s in State]))
@json_option
def ops_list(ledger_url: str, states: tuple[str, ...], as_json: bool) -> None:
    """List operations (optionally by state)."""
    with open_ledger(ledger_url) as ledger:
        records = ledger.list_by_state(*(State(s) for s in states))
        if as_json:
            click.echo(
                json.dumps([receipt_view(ledger, r) for r in records], indent=2, sort_keys=True)
            )
            return
        table = Table(title=f"{len(records)} operations", title_justify="left")
        for column in ("call node", "state", "server", "tool", "operation", "warnings / reason"):
            table.add_column(column)
        for r in records:
            note = r.reconciliation_reason or ", ".join(r.warnings) or ""
            table.add_row(
                r.call_node_id,
                r.state.value,
                r.server_status_raw or "-",
                r.tool_name,
                r.operation_id or "-",
                note,
            )
        Console().print(table)


@ops.command("show")
@click.argument("node")
@ledger_option
@json_option
def ops_show(node: str, ledger_url: str, as_json: bool) -> None:
    """Show one operation: its state, receipt and timeline."""
    with open_ledger(ledger_url) as ledger:
        record = _get(ledger, node)
        view = receipt_view(ledger, record)
        history = [
            {"version": h.version, "state": h.state.value, "event": h.event, "at_utc": h.at_utc}
            for h in ledger.history(node)
        ]
        if as_json:
            click.echo(json.dumps({**view, "history": history}, indent=2, sort_keys=True))
            return
        _print_view(view, as_json=False)
        table = Table(title="timeline", title_justify="left")
        for column in ("v", "event", "state", "at (UTC)"):
            table.add_column(column)
        for h in history:
            table.add_row(str(h["version"]), str(h["event"]), str(h["state"]), str(h["at_utc"]))
        Console().print(table)


@ops.command("cancel")
@click.argument("node")
@ledger_option
@json_option
def ops_cancel(node: str, ledger_url: str, as_json: bool) -> None:
    """Request cancellation; prints the outcome (requested/cancelled/already_terminal)."""
    from longcall.runtime.engine import request_cancel

    with open_ledger(ledger_url) as ledger:
        outcome, _ = request_cancel(
            ledger, _get(ledger, node), now=time.time(), jitter=0.5, requested_by="cli"
        )
        data = {
            "call_node_id": node,
            "outcome": outcome.outcome,
            "cancel_generation": outcome.cancel_generation,
            "status": outcome.status,
            "detail": outcome.detail,
        }
        detail = f" — {outcome.detail}" if outcome.detail else ""
        text = f"{node}: {outcome.outcome} (generation {outcome.cancel_generation}){detail}"
        click.echo(json.dumps(data, sort_keys=True) if as_json else text)


@ops.command("answer")
@click.argument("node")
@click.option("--key", required=True, help="The input request key to answer.")
@click.option("--json", "value_json", required=True, help="The answer, as JSON.")
@ledger_option
def ops_answer(node: str, key: str, value_json: str, ledger_url: str) -> None:
    """Answer one pending input key of an operation (X4)."""
    from longcall.runtime.engine import record_answers

    try:
        value = json.loads(value_json)
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--json") from exc
    with open_ledger(ledger_url) as ledger:
        try:
            record = record_answers(
                ledger, _get(ledger, node), {key: value}, now=time.time(), jitter=0.5
            ).record
        except LongcallError as exc:
            raise click.ClickException(str(exc)) from exc
        click.echo(f"{node}: answered {key!r}; pending {list(record.input_keys_pending)}")


@ops.command("reconcile")
@click.argument("node")
@click.option(
    "--as",
    "resolution",
    required=True,
    type=click.Choice([r.value for r in e.Resolution]),
    help="What the operator found.",
)
@click.option("--actor", default=lambda: os.environ.get("USER", "operator"), help="Who decides.")
@click.option("--note", required=True, help="Why (kept in the record and the receipt).")
@click.option("--operation-id", default=None, help="The remote operation id, if found.")
@click.option("--result", "result_json", default=None, help="The outcome payload, as JSON.")
@ledger_option
def ops_reconcile(
    node: str,
    resolution: str,
    actor: str,
    note: str,
    operation_id: str | None,
    result_json: str | None,
    ledger_url: str,
) -> None:
    """Resolve an operation in reconciliation by hand (recorded with who and why)."""
    from longcall.runtime.step import commit

    payload = canonical_json(
        json.loads(result_json) if result_json else {"resolution": resolution, "note": note}
    )
    event = e.ReconciledManually(
        resolution=e.Resolution(resolution),
        actor=actor,
        note=note,
        operation_id=operation_id,
        result_digest=digest_bytes(payload),
    )
    with open_ledger(ledger_url) as ledger:
        record = _get(ledger, node)
        try:
            transition = handle(record, event, now=time.time(), jitter=0.5)
            commit(ledger, record, transition, event=event.name, result_payload=payload)
        except LongcallError as exc:
            raise click.ClickException(str(exc)) from exc
        click.echo(f"{node}: {transition.record.state.value} (by {actor}: {note})")


def _get(ledger: Ledger, node: str) -> OperationRecord:
    record = ledger.find(node)
    if record is None:
        raise click.ClickException(f"no operation is recorded for call node {node!r}")
    return record


__all__ = ["call", "ops", "worker"]
