"""``longcall worker``: drive and resume every open operation of a ledger, one log line
per change (SPEC O1, D1).

Must not: decide anything: :meth:`longcall.Client.drive` does; this prints.
"""

from __future__ import annotations

import asyncio
import signal
import time
from pathlib import Path

import click
from rich.markup import escape

from longcall.cli.common import (
    LONGEST_LEASE_S,
    RESUME_KEY,
    ExitCode,
    FiniteFloatRange,
    client_for,
    err_console,
    ledger_option,
    ledger_shown,
    metrics_options,
    one_line,
    qps_option,
    quiet_option,
    run_async,
    servers_option,
    webhook_address,
    webhook_listen_option,
)
from longcall.cli.common import open_webhooks as _open_webhooks
from longcall.cli.show import holder_id, input_lines
from longcall.client import (
    CallOutcome,
    CallResult,
    Client,
    default_ledger_url,
)
from longcall.client import Progress as CallProgress
from longcall.core import State


def stamp_of(holder: str) -> str:
    """What starts a worker's log line: the time, and its short lease holder id."""
    return time.strftime("%H:%M:%S") + (f" [{holder}]" if holder else "")


def worker_line(
    result: CallResult, previous: State | None, ledger_url: str | None, holder: str = ""
) -> list[str]:
    """The log lines of one change: one per state change, plus the question of a new
    input round with its ready-to-paste answer. ``holder``: the worker's short id (what
    ``longcall ops show`` names as the lease holder), after the time."""
    stamp = stamp_of(holder)
    was = f"{previous.value} → " if previous is not None and previous is not result.state else ""
    detail = ""
    if result.record.is_terminal:
        detail = f"{result.outcome.value}" + (
            f" ({', '.join(result.warnings)})" if result.warnings else ""
        )
    elif result.state is State.RECONCILIATION_REQUIRED:
        detail = f"needs an operator: {result.reason}"
    elif result.operation_id and previous in (None, State.SUBMITTING, State.SUBMISSION_UNKNOWN):
        detail = f"{result.tool} at {result.server} (operation {result.operation_id})"
    head = f"{stamp} {result.call_node_id} {was}{result.state.value}" + (
        f": {detail}" if detail else ""
    )
    lines = [one_line(head)]
    if result.input is not None:
        lines.extend("         " + line for line in input_lines(result.input, ledger_url))
    return lines


@click.command()
@ledger_option
@qps_option
@click.option(
    "--until-idle", is_flag=True, help="Exit once nothing is left to do without a person."
)
@click.option(
    "--disable",
    "disabled",
    multiple=True,
    metavar="PROTOCOL",
    help="Start no new operations on this protocol adapter (existing ones finish).",
)
@click.option(
    "--lease",
    "lease_s",
    type=FiniteFloatRange(min=0.5, max=LONGEST_LEASE_S),
    default=30.0,
    show_default=True,
    help="Seconds another worker waits before taking over this one's operations if it stops.",
)
@metrics_options
@click.option(
    "--runs",
    "runs",
    multiple=True,
    metavar="PROTOCOL=VERSION",
    help="Drive only operations bound to this adapter version (repeatable); by default "
    "the versions this build's adapters bind, so that workers of two builds share one "
    "ledger. 'any': every version, whatever build bound it.",
)
@webhook_listen_option
@quiet_option
@servers_option
@click.pass_context
def worker(
    ctx: click.Context,
    ledger_url: str | None,
    qps: float,
    until_idle: bool,
    disabled: tuple[str, ...],
    lease_s: float,
    metrics_port: int | None,
    metrics_host: str,
    runs: tuple[str, ...],
    webhook_listen: str | None,
    quiet: bool,
    servers_path: Path | None,
) -> None:
    """Drive (and resume) the open operations of the ledger, logging one line per state
    change on stderr (and when a server stops or starts answering); several workers
    share them through leases.

    Answers and cancels written by `longcall ops` from another terminal take effect
    within a second. With --until-idle it exits once every operation is accepted or
    waits for a person (exit 4 when one does).

    \b
    Examples:
      longcall worker
      longcall worker --until-idle --quiet
    """
    console = err_console()
    driver: list[Client] = []
    """The worker's client, once made: its lease holder id tags every log line."""

    def holder() -> str:
        owner = driver[0].executor.owner if driver else None
        return "" if owner is None else holder_id(owner)

    def log(result: CallResult, previous: State | None) -> None:
        if not quiet:
            for line in worker_line(result, previous, ledger_url, holder()):
                console.print(escape(line), soft_wrap=True)

    unreachable: set[str] = set()

    def log_reachability(progress: CallProgress) -> None:
        """A server that stops answering (and answers again) is a line too: its
        operations wait without a state change, retried with backoff."""
        node, stamp = progress.call_node_id, stamp_of(holder())
        if progress.server_unreachable and node not in unreachable:
            unreachable.add(node)
            line = f"{stamp} {node} server unreachable, retrying: {progress.message or ''}"
        elif not progress.server_unreachable and node in unreachable:
            unreachable.discard(node)
            line = f"{stamp} {node} server answers again"
        else:
            return
        if not quiet:
            console.print(escape(one_line(line)), soft_wrap=True)

    ctx.meta[RESUME_KEY] = f"longcall worker{ledger_shown(ledger_url)}"
    versions = _versions_run(runs)
    webhook_at = webhook_address(webhook_listen) if webhook_listen is not None else None

    async def main() -> list[CallResult]:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        loop.add_signal_handler(signal.SIGTERM, stop.set)
        client = client_for(
            ledger_url,
            create=True,
            connects=True,
            servers_path=servers_path,
            poll_qps_max=qps,
            drive_all=True,
            on_change=log,
            on_progress=log_reachability,
            disabled_protocols=disabled,
            lease_s=lease_s,
            versions=versions,
        )
        driver.append(client)
        async with client:
            if metrics_port is not None:
                client.executor.metrics.serve(metrics_port, host=metrics_host)
                console.print(f"worker: metrics at {client.executor.metrics.url}")
            receiving = None
            if webhook_at is not None:
                # Key and socket first: a missing key or a taken port stops the worker now.
                receiving = asyncio.ensure_future(_open_webhooks(client, *webhook_at))
            if not quiet:
                where = ledger_url or default_ledger_url()
                console.print(
                    escape(
                        f"worker: driving the open operations of {where}"
                        f" as [{holder()}] (lease holder {client.executor.owner})"
                    ),
                    soft_wrap=True,
                )
            driving = asyncio.ensure_future(client.drive(until_idle=until_idle))
            stopping = asyncio.ensure_future(stop.wait())
            try:
                await asyncio.wait({driving, stopping}, return_when=asyncio.FIRST_COMPLETED)
            finally:
                stopping.cancel()
                if receiving is not None:
                    receiving.cancel()
                if not driving.done():
                    driving.cancel()
            if driving.done() and not driving.cancelled() and driving.exception() is not None:
                raise driving.exception()  # type: ignore[misc]
            return client.results(State.INPUT_REQUIRED, State.RECONCILIATION_REQUIRED)

    waiting = [r for r in run_async(main) if r.outcome is CallOutcome.NEEDS_PERSON]
    if not quiet:
        console.print(f"worker: stopped; {len(waiting)} operation(s) wait for a person")
    if until_idle and waiting:
        raise click.exceptions.Exit(int(ExitCode.NEEDS_PERSON))


def _versions_run(runs: tuple[str, ...]) -> frozenset[tuple[str, str]] | None:
    """The versions a worker drives: those of ``--runs``, every one for ``any`` (None),
    or by default those this build's adapters bind (R2)."""
    if not runs:
        from longcall.adapters.routing import carried_versions  # not at start-up: slow

        return carried_versions()
    if "any" in runs:
        if len(runs) > 1:
            raise click.BadParameter("'any' stands alone", param_hint="--runs")
        return None
    return frozenset(_version_pair(item) for item in runs)


def _version_pair(item: str) -> tuple[str, str]:
    """``PROTOCOL=VERSION`` of ``--runs``, or a usage error."""
    protocol, sep, version = item.partition("=")
    if not sep or not protocol or not version:
        raise click.BadParameter(f"expected PROTOCOL=VERSION, got {item!r}", param_hint="--runs")
    return protocol, version
