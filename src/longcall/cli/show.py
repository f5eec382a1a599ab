"""What people read: a call node's table, its question and the command that answers it,
the next step, and a progress bar for a waiting command.

Must not: decide anything, or read the ledger itself (the client hands it what to show).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import click
from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, Progress, TaskID, TextColumn, TimeElapsedColumn
from rich.table import Table

from longcall.cli.common import err_console, ledger_shown, out_console, shell_quote
from longcall.client import (
    CallOutcome,
    CallResult,
    InputRequest,
)
from longcall.client import Progress as CallProgress
from longcall.core import State
from longcall.errors import InvalidAnswer

# --- what people read -----------------------------------------------------------------

OUTCOME_STYLE = {
    CallOutcome.OK: "green",
    CallOutcome.TOOL_ERROR: "red",
    CallOutcome.PROTOCOL_ERROR: "red",
    CallOutcome.CANCELLED: "yellow",
    CallOutcome.NEEDS_PERSON: "bold magenta",
    CallOutcome.PENDING: "cyan",
}


def outcome_text(outcome: CallOutcome) -> str:
    return f"[{OUTCOME_STYLE[outcome]}]{outcome.value}[/]"


def answer_command(request: InputRequest, ledger_url: str | None) -> str:
    """A ready-to-paste ``longcall ops answer`` for the round (example values to edit)."""
    node = shell_quote(request.call_node_id)
    where = ledger_shown(ledger_url)
    if len(request.questions) == 1 and request.questions[0].is_form:
        fields = [f for f in request.questions[0].fields if f.required] or list(
            request.questions[0].fields
        )
        pairs = " ".join(f"{f.name}={shell_quote(f.example())}" for f in fields)
        return f"longcall ops answer {node} {pairs}{where}".replace("  ", " ")
    key = shell_quote(request.questions[0].key)
    return (
        f'longcall ops answer {node} --key {key} --answer-json \'{{"action": "accept", …}}\'{where}'
    )


def input_lines(request: InputRequest, ledger_url: str | None) -> list[str]:
    """The questions of a round, their fields, and the command that answers."""
    lines = [f"{request.call_node_id} needs an answer (input round {request.input_round}):"]
    for question in request.questions:
        lines.append(f"  {question.message or '(no message)'}  [key {question.key}]")
        for field in question.fields:
            kind = field.type or "any"
            if field.choices:
                kind += " of " + ", ".join(map(str, field.choices))
            need = "required" if field.required else "optional"
            about = f" — {field.description}" if field.description else ""
            lines.append(f"    {field.name}: {kind}, {need}{about}")
        if not question.is_form:
            lines.append(f"    ({question.method or 'a request'}: answer with a whole JSON answer)")
    lines.append(f"  answer: {answer_command(request, ledger_url)}")
    return lines


def next_step(result: CallResult, ledger_url: str | None) -> str | None:
    """What a person does next with a settled-but-not-ok or unfinished call."""
    node = shell_quote(result.call_node_id)
    where = ledger_shown(ledger_url)
    if result.input is not None:
        return None  # input_lines says it
    if result.state is State.RECONCILIATION_REQUIRED:
        return (
            f"needs an operator: {result.reason or 'the outcome cannot be proven'}. Check the"
            f" server, then: longcall ops reconcile {node} --as resume|never_created|completed"
            f"|failed|cancelled --note WHY{where}"
        )
    if result.outcome is CallOutcome.PENDING:
        return f"still running; wait with: longcall ops wait {node}{where}"
    return None


def holder_id(owner: str) -> str:
    """A lease holder's short id, as a worker's log lines show it: the start of the
    random part of the id the ledger records (``host:pid:random``), else the whole id."""
    host_pid, _, random_part = owner.rpartition(":")
    return random_part[:HOLDER_ID_CHARS] if host_pid and random_part else owner


HOLDER_ID_CHARS = 8
"""32 random bits: enough to tell a ledger's holders apart by eye."""


def when(at: float, now: float) -> str:
    """``17:03:10 UTC (in 12 s)`` or ``… (3 min ago)``: a time and how far it is."""
    delta = at - now
    seconds = abs(round(delta))
    far = f"{seconds} s" if seconds < 120 else f"{seconds // 60} min"
    clock = time.strftime("%H:%M:%S UTC", time.gmtime(at))
    return f"{clock} (in {far})" if delta >= 0 else f"{clock} ({far} ago)"


def print_result(
    result: CallResult,
    *,
    as_json: bool,
    ledger_url: str | None,
    asked: bool = False,
    more: Sequence[tuple[str, str]] = (),
) -> None:
    """A call node for people (a table on stdout, the next step on stderr) or machines;
    ``asked``: its question was shown already (by the waiting command), not again;
    ``more``: further rows of the table (the JSON view carries them itself)."""
    if as_json:
        click.echo(json.dumps(result.to_json(), indent=2, sort_keys=True))
    else:
        table = Table(
            title=f"call node {escape(result.call_node_id)}",
            title_justify="left",
            show_header=False,
        )
        table.add_column("", style="bold")
        table.add_column("", overflow="fold")
        table.add_row("outcome", outcome_text(result.outcome))
        rows: list[tuple[str, Any]] = [
            ("state", result.state.value),
            ("tool", result.tool),
            ("server", result.server),
            ("protocol", result.protocol),
            ("operation", result.operation_id),
            ("server status", result.record.server_status_raw),
            ("status message", result.status_message if not result.record.is_terminal else None),
            ("warnings", ", ".join(result.warnings)),
            ("reason", result.reason),
            ("result digest", result.receipt.result_digest if result.receipt else None),
            ("result", result.result),
            *more,
        ]
        for name, value in rows:
            if value not in (None, "", [], ()):
                text = value if isinstance(value, str) else json.dumps(value, indent=2)
                table.add_row(name, escape(text))
        out_console().print(table)
    console = err_console()
    if result.input is not None and not asked:
        for line in input_lines(result.input, ledger_url):
            console.print(escape(line), soft_wrap=True)
    step = next_step(result, ledger_url)
    if step is not None:
        console.print(escape(step), soft_wrap=True)


def say_replayed(result: CallResult) -> None:
    """On stderr: a replayed call sent nothing, when it was accepted, and how to make the
    call again on purpose."""
    import time

    receipt = result.receipt
    when = receipt.accepted_at if receipt is not None else result.record.updated_at
    at = time.strftime("%H:%M", time.localtime(when))
    err_console().print(
        escape(
            f"longcall: {result.call_node_id} was already accepted at {at}; nothing sent"
            " (this is its receipt). To call again on purpose, give a new node: --node NAME"
        ),
        soft_wrap=True,
    )


class ProgressView:
    """A progress bar on stderr for one call: fills from the reported fraction, says when
    the server is unreachable, and disappears when the call settles."""

    def __init__(self, node: str, *, enabled: bool, console: Console | None = None) -> None:
        self.node = node
        console = console or err_console()
        self.progress = Progress(
            TextColumn("{task.description}"),
            BarColumn(),
            TextColumn("{task.percentage:>3.0f}%"),
            TimeElapsedColumn(),
            console=console,
            transient=True,
            disable=not enabled or not console.is_terminal,
        )
        self.task: TaskID | None = None
        self.asked = False
        """A question was shown (so the final view need not show it again)."""

    def __enter__(self) -> ProgressView:
        self.progress.start()
        self.task = self.progress.add_task(escape(self.node), total=None)
        return self

    def __exit__(self, *exc: object) -> None:
        self.progress.stop()

    def asking(self, lines: Sequence[str]) -> None:
        """Show a question above the bar (or alone, without one), and say the call waits."""
        console = self.progress.console if not self.progress.disable else err_console()
        self.asked = True
        for line in lines:
            console.print(escape(line), soft_wrap=True)
        if self.task is not None:
            text = escape(f"{self.node}: waiting for an answer (see above)")
            self.progress.update(self.task, description=text)

    def update(self, report: CallProgress) -> None:
        if self.task is None or report.call_node_id != self.node:
            return
        if report.server_unreachable:
            why = escape(report.message or "")
            text = f"{escape(self.node)}: [yellow]server unreachable, retrying[/] ({why})"
            self.progress.update(self.task, description=text)
            return
        description = escape(f"{self.node}: {report.message or ''}")
        if report.fraction is not None:
            self.progress.update(
                self.task, total=1.0, completed=report.fraction, description=description
            )
        else:
            self.progress.update(self.task, description=description)


def ask_a_person(
    view: ProgressView,
    ledger_url: str | None,
    fields: Mapping[str, str] | None = None,
    refuse: Callable[[BaseException], None] | None = None,
) -> Callable[[InputRequest], Any]:
    """The input callback of a waiting command: answer from ``--answer`` fields where they
    fit; else show the question and the command that answers it, and leave it to the
    person (who answers from another terminal while this command keeps waiting). Fields
    that do not fit the form (a misspelt name, a value its type cannot read) are handed
    to ``refuse`` with the command that answers, and the question is left to a person."""
    from longcall.runtime.inputs import answers_from_form_fields

    async def on_input(request: InputRequest) -> dict[str, Any] | None:
        try:
            answers = answers_from_form_fields(request, fields or {})
        except InvalidAnswer as exc:
            if refuse is None:
                raise
            refuse(
                InvalidAnswer(
                    f"--answer does not fit the question of {request.call_node_id}: {exc}."
                    " The call goes on and waits for an answer:"
                    f" {answer_command(request, ledger_url)}"
                )
            )
            return None
        if answers is not None:
            return answers
        view.asking(input_lines(request, ledger_url))
        return None

    return on_input
