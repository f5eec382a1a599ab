"""``longcall ops``: look at and steer the recorded operations of a ledger (SPEC O1).

Each subcommand is one call to :class:`longcall.Client`: where, list, show, wait,
result, cancel, answer, reconcile. Must not: write the ledger by any other path.
"""

from __future__ import annotations

import dataclasses
import json
import os
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import click
from rich.markup import escape
from rich.table import Table

from longcall.cli.common import (
    LONGEST_WAIT_S,
    RESUME_KEY,
    Age,
    ExitCode,
    FiniteFloatRange,
    client_for,
    err_console,
    json_option,
    ledger_option,
    ledger_shown,
    on_the_ledger,
    one_line,
    out_console,
    outcome_exit,
    parse_fields,
    parse_json,
    qps_option,
    quiet_option,
    run_async,
    servers_option,
    shell_quote,
)
from longcall.cli.show import (
    OUTCOME_STYLE,
    ProgressView,
    ask_a_person,
    holder_id,
    outcome_text,
    print_result,
    when,
)
from longcall.client import (
    LEDGER_ENV,
    CallResult,
    default_ledger_path,
    default_ledger_url,
    result_of,
)
from longcall.core import OperationRecord, State
from longcall.core.events import Resolution
from longcall.errors import (
    InvalidAnswer,
    NotWaitingForInput,
)
from longcall.ledger import HistoryRow, Ledger, ListedOperation, OperationQuery
from longcall.ledger.base import utc_iso


@click.group()
def ops() -> None:
    """Look at and steer the operations of the ledger.

    \b
    Examples:
      longcall ops list
      longcall ops show gate
      longcall ops answer gate approved=true
      longcall ops wait gate
    """


@ops.command("where")
def ops_where() -> None:
    """Print the ledger URL commands use when --ledger is not given.

    \b
    Example:
      longcall ops where
    """
    source = (
        f"${LEDGER_ENV}"
        if os.environ.get(LEDGER_ENV)
        else f"default ({default_ledger_path().parent})"
    )
    click.echo(f"{default_ledger_url()}  [{source}]")


def _note(result: CallResult) -> str:
    shadow_of = result.record.shadow_of
    if shadow_of is not None:
        rest = _plain_note(result)
        return f"shadow of {shadow_of}" + (f"; {rest}" if rest else "")
    return _plain_note(result)


def _plain_note(result: CallResult) -> str:
    if result.input is not None:
        questions = [q.message or q.key for q in result.input.questions]
        return "asks: " + "; ".join(questions)
    if result.reason:
        return result.reason
    if result.warnings:
        return ", ".join(result.warnings)
    return "" if result.record.is_terminal else result.status_message or ""


LIST_LIMIT_MAX = 10_000
"""The most ``ops list --limit`` shows (one read of the ledger)."""


@ops.command("list")
@ledger_option
@click.option(
    "--state",
    "states",
    multiple=True,
    type=click.Choice([s.value for s in State]),
    help="Only operations in this state (repeatable).",
)
@click.option("--tool", default=None, help="Only calls of this tool.")
@click.option(
    "--server", default=None, metavar="URL", help="Only calls to this server (its URL as recorded)."
)
@click.option(
    "--older-than",
    "older_than_s",
    type=Age(),
    default=None,
    help="Only operations created longer ago than this (10m, 2h, 1d, 1h30m).",
)
@click.option(
    "--newer-than",
    "newer_than_s",
    type=Age(),
    default=None,
    help="Only operations created within this long (10m, 2h, 1d, 1h30m).",
)
@click.option(
    "--limit",
    type=click.IntRange(1, LIST_LIMIT_MAX),
    default=None,
    help="At most this many, the newest (still listed oldest first); a note says how"
    " many more there are.",
)
@json_option
def ops_list(
    ledger_url: str | None,
    states: tuple[str, ...],
    tool: str | None,
    server: str | None,
    older_than_s: float | None,
    newer_than_s: float | None,
    limit: int | None,
    as_json: bool,
) -> None:
    """List the operations of the ledger, oldest first; every filter given must hold.

    \b
    Examples:
      longcall ops list
      longcall ops list --state input_required --state reconciliation_required
      longcall ops list --tool crawl --newer-than 2h --limit 20
      longcall ops list --server http://127.0.0.1:8765/mcp --older-than 1d --json
    """
    now = time.time()
    query = OperationQuery(
        states=tuple(State(s) for s in states),
        tool=tool,
        server=server,
        created_after_utc=None if newer_than_s is None else utc_iso(now - newer_than_s),
        created_before_utc=None if older_than_s is None else utc_iso(now - older_than_s),
        now=now,
    )
    with on_the_ledger(ledger_url) as client:
        listed = _listed(client.ledger, query, limit)
        results = [result_of(client.ledger, row.record) for row in listed]
        total = client.ledger.count(query) if limit is not None else len(results)
    more = total - len(results)
    if as_json:
        click.echo(json.dumps([r.to_json() for r in results], indent=2, sort_keys=True))
        if more:
            click.echo(f"longcall: {_more_note(len(results), total)}", err=True)
        return
    # One line per operation, never cut or folded (a terminal wraps a long line, and a
    # node id stays whole to copy): node, outcome (coloured), state, tool, note.
    rows = [(r.call_node_id, r.outcome, r.state.value, r.tool, one_line(_note(r))) for r in results]
    header = ("CALL NODE", "OUTCOME", "STATE", "TOOL")
    widths = [max([len(h), *(len(str(row[i])) for row in rows)]) for i, h in enumerate(header)]
    console = out_console()
    console.print(
        "[bold]" + "  ".join(h.ljust(w) for h, w in zip(header, widths, strict=True)) + "  NOTE[/]",
        soft_wrap=True,
    )
    for node, outcome, state, tool_name, note in rows:
        cells = [
            escape(node.ljust(widths[0])),
            f"[{OUTCOME_STYLE[outcome]}]{outcome.value.ljust(widths[1])}[/]",
            state.ljust(widths[2]),
            escape(tool_name.ljust(widths[3])),
            escape(note),
        ]
        console.print("  ".join(cells).rstrip(), soft_wrap=True)
    footer = _more_note(len(rows), total) if more else f"{len(rows)} operation(s)"
    console.print(escape(footer), style="dim", soft_wrap=True)


def _listed(ledger: Ledger, query: OperationQuery, limit: int | None) -> list[ListedOperation]:
    """The operations ``query`` selects, oldest first: with ``limit``, only the newest
    that many; without, every one (read a page at a time)."""
    if limit is not None:
        newest = ledger.browse(dataclasses.replace(query, limit=limit))
        return newest[::-1]
    rows: list[ListedOperation] = []
    while True:
        after = rows[-1].seq if rows else None
        page = ledger.browse(
            dataclasses.replace(query, oldest_first=True, after_seq=after, limit=LIST_LIMIT_MAX)
        )
        rows += page
        if len(page) < LIST_LIMIT_MAX:
            return rows


def _more_note(shown: int, total: int) -> str:
    return (
        f"{shown} of {total} operations shown, the newest; {total - shown} more:"
        " a higher --limit, or a filter"
    )


TIMELINE_LIMIT = 20


def collapsed(history: Sequence[HistoryRow]) -> list[tuple[HistoryRow, HistoryRow, int]]:
    """The timeline with runs of the same (event, state) folded into one row each:
    (first, last, how many)."""
    rows: list[tuple[HistoryRow, HistoryRow, int]] = []
    for row in history:
        if rows and (rows[-1][0].event, rows[-1][0].state) == (row.event, row.state):
            first, _last, count = rows[-1]
            rows[-1] = (first, row, count + 1)
        else:
            rows.append((row, row, 1))
    return rows


@ops.command("show")
@click.argument("node")
@ledger_option
@click.option(
    "--limit",
    type=click.IntRange(min=0),
    default=TIMELINE_LIMIT,
    show_default=True,
    help="Timeline rows to show, the latest (0: all, and repeats not folded).",
)
@json_option
def ops_show(node: str, ledger_url: str | None, limit: int, as_json: bool) -> None:
    """Show one operation: its outcome, its question if it waits for one, and its
    timeline (repeated polls folded into one row with a count).

    \b
    Examples:
      longcall ops show gate
      longcall ops show gate --limit 0 --json
    """
    now = time.time()
    with on_the_ledger(ledger_url) as client:
        result = client.result(node)
        history = client.history(node)
        lease = _lease_of(client.ledger, result.record)
    next_poll = _next_poll_at(result.record)
    if as_json:
        rows = history if limit == 0 else history[-limit:]
        view = result.to_json()
        view["lease"] = None if lease is None else lease.to_json(now)
        view["next_poll_at_utc"] = None if next_poll is None else utc_iso(next_poll)
        view["history"] = [
            {"version": h.version, "state": h.state.value, "event": h.event, "at_utc": h.at_utc}
            for h in rows
        ]
        view["history_total"] = len(history)
        click.echo(json.dumps(view, indent=2, sort_keys=True))
        return
    print_result(
        result,
        as_json=False,
        ledger_url=ledger_url,
        more=_driving_rows(result.record, lease, next_poll, now),
    )
    folded = [(h, h, 1) for h in history] if limit == 0 else collapsed(history)
    shown = folded if limit == 0 else folded[-limit:]
    table = Table(title="timeline", title_justify="left")
    for column in ("v", "event", "state", "at (UTC)"):
        table.add_column(column)
    if len(shown) < len(folded):
        table.add_row(
            "…", f"{len(folded) - len(shown)} earlier row(s): --limit 0 shows all", "", ""
        )
    for first, last, count in shown:
        version = str(first.version) if count == 1 else f"{first.version}–{last.version}"
        event = first.event if count == 1 else f"{first.event} ×{count}"
        at = first.at_utc if count == 1 else f"{first.at_utc} … {last.at_utc}"
        table.add_row(version, event, first.state.value, at)
    out_console().print(table)


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class Lease:
    """Who holds an operation's lease (a worker, or a client waiting on its own call)."""

    owner: str
    """The holder's id as the ledger records it."""
    kind: str | None
    """``worker`` or ``client``; None when the holder is no longer registered."""
    until: float | None
    """When its lease lapses unless renewed (None: no longer registered)."""

    def live(self, now: float) -> bool:
        return self.until is not None and self.until > now

    def to_json(self, now: float) -> dict[str, Any]:
        return {
            "owner": self.owner,
            "id": holder_id(self.owner),
            "kind": self.kind,
            "until_utc": None if self.until is None else utc_iso(self.until),
            "live": self.live(now),
        }

    def row(self, now: float) -> str:
        who = f"{self.kind or 'holder'} {holder_id(self.owner)} ({self.owner})"
        if self.until is None:
            return f"{who}, no longer registered: a running worker takes it over"
        if self.live(now):
            return f"{who} until {when(self.until, now)}"
        return f"{who}, lapsed {when(self.until, now)}: a running worker takes it over"


def _lease_of(ledger: Ledger, record: OperationRecord) -> Lease | None:
    """The lease of an open operation, read as the console reads it; None when nobody
    holds it."""
    rows = ledger.browse(OperationQuery(search=record.call_node_id, limit=5))
    owner = next((r.owner for r in rows if r.record.call_node_id == record.call_node_id), None)
    if owner is None or record.is_terminal:
        return None
    holder = next((w for w in ledger.workers() if w.owner == owner), None)
    return Lease(
        owner=owner,
        kind=None if holder is None else holder.kind,
        until=None if holder is None else holder.lease_until,
    )


def _next_poll_at(record: OperationRecord) -> float | None:
    """When a driver next asks the server (a poll, a retry, a fetch); None when nothing
    is asked until a person or an operator acts, or ever again."""
    for_a_person = record.state is State.INPUT_REQUIRED and bool(record.input_keys_pending)
    if record.is_terminal or record.state is State.RECONCILIATION_REQUIRED or for_a_person:
        return None
    return record.next_poll_at


def _driving_rows(
    record: OperationRecord, lease: Lease | None, next_poll: float | None, now: float
) -> list[tuple[str, str]]:
    """The rows of ``ops show`` that say who drives the operation and when it next acts."""
    if record.is_terminal:
        return []
    rows = [("lease", NOBODY if lease is None else lease.row(now))]
    if next_poll is not None:
        driven = lease is not None and lease.live(now)
        due = when(next_poll, now)
        rows.append(("next poll", due if driven else f"{due}, once a worker holds it"))
    return rows


NOBODY = "nobody holds it: a running `longcall worker` on this ledger claims it"


@ops.command("wait")
@click.argument("node")
@ledger_option
@click.option(
    "--timeout",
    "timeout_s",
    type=FiniteFloatRange(min=0, max=LONGEST_WAIT_S),
    default=None,
    help="Stop waiting after this many seconds (the call goes on).",
)
@qps_option
@json_option
@quiet_option
@servers_option
@click.pass_context
def ops_wait(
    ctx: click.Context,
    node: str,
    ledger_url: str | None,
    timeout_s: float | None,
    qps: float,
    as_json: bool,
    quiet: bool,
    servers_path: Path | None,
) -> None:
    """Drive NODE from the ledger until it is settled (no URL or arguments needed).

    A question the tool asks is shown with the `longcall ops answer` command that
    answers it; the wait goes on until it is answered (from another terminal) and the
    call ends, or until --timeout.

    \b
    Examples:
      longcall ops wait gate
      longcall ops wait gate --timeout 60 --json
    """
    ctx.meta[RESUME_KEY] = f"longcall ops wait {shell_quote(node)}{ledger_shown(ledger_url)}"
    view = ProgressView(node, enabled=not quiet)

    async def main() -> CallResult:
        async with client_for(
            ledger_url,
            create=False,
            connects=True,
            servers_path=servers_path,
            sign_in=True,
            poll_qps_max=qps,
            on_progress=view.update,
            on_input=ask_a_person(view, ledger_url),
        ) as client:
            with view:
                return await client.wait(node, timeout_s=timeout_s, through_input=True)

    result = run_async(main)
    print_result(result, as_json=as_json, ledger_url=ledger_url, asked=view.asked)
    raise click.exceptions.Exit(int(outcome_exit(result)))


@ops.command("result")
@click.argument("node")
@ledger_option
@json_option
def ops_result(node: str, ledger_url: str | None, as_json: bool) -> None:
    """Print NODE's accepted result (JSON) and exit with its outcome's code.

    \b
    Examples:
      longcall ops result gate
      longcall ops result gate --json
    """
    with on_the_ledger(ledger_url) as client:
        result = client.result(node)
    if as_json:
        click.echo(json.dumps(result.to_json(), indent=2, sort_keys=True))
    elif result.record.is_terminal:
        click.echo(json.dumps(result.result, indent=2, sort_keys=True))
        if not result.ok:
            err_console().print(f"{escape(node)}: {outcome_text(result.outcome)}")
    else:
        print_result(result, as_json=False, ledger_url=ledger_url)
    raise click.exceptions.Exit(int(outcome_exit(result)))


@ops.command("cancel")
@click.argument("node")
@ledger_option
@json_option
def ops_cancel(node: str, ledger_url: str | None, as_json: bool) -> None:
    """Ask for cancellation and print what it achieved: requested, cancelled,
    already_terminal or not_cancellable. A running driver sends it within a second.

    \b
    Example:
      longcall ops cancel c1
    """
    with on_the_ledger(ledger_url) as client:
        outcome = run_async(lambda: client.cancel(node))
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
    if outcome.outcome == "not_cancellable":
        raise click.exceptions.Exit(int(ExitCode.REFUSED))


@ops.command("answer")
@click.argument("node")
@click.argument("fields", nargs=-1, metavar="[FIELD=VALUE]...")
@click.option("--key", default=None, help="The input request to answer, when several wait.")
@click.option(
    "--answer-json",
    "answer_json",
    default=None,
    metavar="JSON",
    help='A whole answer, e.g. \'{"action": "accept", "content": {…}}\'.',
)
@click.option("--decline", is_flag=True, help="Answer no.")
@click.option("--cancel", "dismiss", is_flag=True, help="Dismiss the question without a choice.")
@ledger_option
@json_option
def ops_answer(
    node: str,
    fields: tuple[str, ...],
    key: str | None,
    answer_json: str | None,
    decline: bool,
    dismiss: bool,
    ledger_url: str | None,
    as_json: bool,
) -> None:
    """Answer the question NODE waits for, by field name; the answer is checked against
    the form before it is stored, and a running driver sends it within a second.

    \b
    Examples:
      longcall ops answer gate approved=true
      longcall ops answer gate --decline
      longcall ops answer gate --key elicit-1 \\
          --answer-json '{"action": "accept", "content": {"approved": false}}'
      longcall ops answer gate approved=true --json
    """
    chosen = sum(bool(x) for x in (fields, answer_json, decline, dismiss))
    if chosen != 1:
        raise click.UsageError(
            "give FIELD=VALUE pairs, or --answer-json, or --decline, or --cancel"
        )
    with on_the_ledger(ledger_url) as client:
        request = client.input_request(node)
        if request is None:
            state = client.result(node).state.value
            raise NotWaitingForInput(f"{node!r} waits for no input (it is {state})")
        if fields:
            parsed = parse_fields(fields, "FIELD=VALUE")
            run_async(lambda: client.answer(node, fields=parsed, key=key))
        else:
            if answer_json is not None:
                body = parse_json(answer_json, "--answer-json")
            else:
                body = {"action": "decline" if decline else "cancel"}
            keys = [key] if key is not None else list(request.keys)
            if len(keys) > 1:
                raise InvalidAnswer(f"{node!r} waits for {', '.join(keys)}: name one with --key")
            run_async(lambda: client.answer(node, {keys[0]: body}))
        after = client.result(node)
    if as_json:
        click.echo(json.dumps(after.to_json(), indent=2, sort_keys=True))
        return
    pending = list(after.record.input_keys_pending)
    click.echo(
        f"{node}: answer stored for round {request.input_round}"
        + (f"; still waiting for {', '.join(pending)}" if pending else "")
        + "; a running worker (or `longcall ops wait`) sends it"
    )


@ops.command("reconcile")
@click.argument("node")
@click.option(
    "--as",
    "resolution",
    required=True,
    type=click.Choice([r.value for r in Resolution]),
    help="What you found out at the server.",
)
@click.option("--note", required=True, help="Why (kept in the record and the receipt).")
@click.option(
    "--actor",
    default=lambda: os.environ.get("USER", "operator"),
    help="Who decides (default: $USER).",
)
@click.option("--operation-id", default=None, help="The remote operation id, if you found it.")
@click.option(
    "--result",
    "result_json",
    default=None,
    metavar="JSON",
    help="The outcome, as JSON (completed/failed/cancelled).",
)
@ledger_option
@json_option
def ops_reconcile(
    node: str,
    resolution: str,
    note: str,
    actor: str,
    operation_id: str | None,
    result_json: str | None,
    ledger_url: str | None,
    as_json: bool,
) -> None:
    """Resolve an operation that waits for an operator, recorded with who and why.

    \b
    Examples:
      longcall ops reconcile c1 --as resume --note "the server says it still runs"
      longcall ops reconcile c1 --as completed --note "checked by hand" --result '{"rows": []}'
    """
    result_value = parse_json(result_json, "--result") if result_json is not None else None
    with on_the_ledger(ledger_url) as client:
        after = run_async(
            lambda: client.reconcile(
                node,
                resolution,
                note=note,
                actor=actor,
                operation_id=operation_id,
                result=result_value,
            )
        )
    if as_json:
        click.echo(json.dumps(after.to_json(), indent=2, sort_keys=True))
        return
    click.echo(f"{node}: {after.state.value} (by {actor}: {note})")
