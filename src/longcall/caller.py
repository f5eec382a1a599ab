"""The caller-side commands of ``longcall`` — ``call``, ``worker``, ``ops`` — and what every
command shares: exit codes and one-line errors (SPEC O1).

Each command is a thin layer over :class:`longcall.Client`: it parses the command line,
asks the client, and prints for people (rich tables, a progress bar, a worker log on
stderr) or, with ``--json``, for machines (stdout). Nothing here decides anything.

Must not: hold logic the Python API lacks (a caller of :mod:`longcall` can do everything
these commands do), cite requirement ids in what a user reads, or let a traceback reach
a user without ``--debug``.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import json
import math
import os
import re
import signal
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, NoReturn

import click
from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, Progress, TaskID, TextColumn, TimeElapsedColumn
from rich.table import Table

from longcall.adapters.servers import (
    SERVERS_ENV,
    ConfigError,
    MissingCredential,
    ServersConfig,
    default_servers_path,
    load_servers,
)
from longcall.client import (
    LEDGER_ENV,
    CallOutcome,
    CallResult,
    Client,
    InputRequest,
    default_ledger_path,
    default_ledger_url,
)
from longcall.client import Progress as CallProgress
from longcall.core import State
from longcall.core.events import Resolution
from longcall.core.keys import canonical_json, check_call_node_id
from longcall.errors import (
    AdapterError,
    ConflictError,
    IntegrityError,
    InvalidAnswer,
    InvalidArguments,
    InvalidCallNode,
    LocalProtocolError,
    LongcallError,
    NotFoundError,
    NotWaitingForInput,
    ServerUnreachable,
    UnavailableError,
    UnsupportedLedgerURL,
    UsageError,
)
from longcall.ledger import HistoryRow

# --- exit codes and one-line errors ---------------------------------------------------


class ExitCode(enum.IntEnum):
    """What a ``longcall`` process's exit status means."""

    OK = 0
    """Done: accepted with an ok outcome, or the command did what it says."""
    ERROR = 1
    """Something failed: the ledger cannot be opened, the driver stopped, a bug."""
    USAGE = 2
    """A bad command line or option value."""
    NOT_OK = 3
    """Accepted, but not ok: a tool error, a protocol error, or cancelled."""
    NEEDS_PERSON = 4
    """Waiting for a person: an input request to answer, or an operation to reconcile."""
    REFUSED = 5
    """Refused: the node holds another request, an answer does not fit its form, or the
    operation's state does not allow the action."""
    UNREACHABLE = 6
    """The server could not be reached."""
    PENDING = 7
    """Not finished yet (the call goes on)."""
    INTERRUPTED = 130
    """Ctrl-C: only local waiting stopped; the call goes on."""


EXIT_CODES_HELP = """\b
Exit codes:
  0    accepted and ok (or the command did what it says)
  1    error (the ledger cannot be opened, the driver stopped, a bug)
  2    usage: a bad command line or option value
  3    accepted, but not ok: a tool error, a protocol error, or cancelled
  4    needs a person: an answer to give, or an operation to reconcile
  5    refused: another request on the node, an answer that does not fit,
       an action the operation's state does not allow
  6    the server could not be reached
  7    not finished yet (the call goes on)
  130  interrupted (Ctrl-C): the call goes on; the last line says how to resume
"""

EXIT_OF_OUTCOME = {
    CallOutcome.OK: ExitCode.OK,
    CallOutcome.TOOL_ERROR: ExitCode.NOT_OK,
    CallOutcome.PROTOCOL_ERROR: ExitCode.NOT_OK,
    CallOutcome.CANCELLED: ExitCode.NOT_OK,
    CallOutcome.NEEDS_PERSON: ExitCode.NEEDS_PERSON,
    CallOutcome.PENDING: ExitCode.PENDING,
}

RESUME_KEY = "longcall.resume"
"""Where a command leaves its how-to-resume line for the Ctrl-C handler (ctx.meta)."""
MESSAGE_CHARS_MAX = 300


def exit_code_of(exc: BaseException) -> ExitCode:
    """The exit status for an error that ends a command, by its branch of the error tree
    (``longcall.errors``)."""
    if isinstance(
        exc,
        InvalidArguments | InvalidCallNode | UnsupportedLedgerURL | ConfigError | MissingCredential,
    ):
        return ExitCode.USAGE  # what was typed (or configured) cannot be used
    if isinstance(exc, ServerUnreachable):
        return ExitCode.UNREACHABLE
    if isinstance(exc, UnavailableError | IntegrityError | OSError):
        return ExitCode.ERROR  # the ledger or the driver failed, or data contradicts itself
    if isinstance(
        exc, UsageError | ConflictError | LocalProtocolError | NotFoundError | AdapterError
    ):
        # Refused: the request contradicts the ledger, the form, the operation's state,
        # or what the server offers (an unknown tool, no task support, no protocol).
        return ExitCode.REFUSED
    return ExitCode.ERROR


def one_line(message: str) -> str:
    """A message as one readable line: whitespace folded, markup of a web page left out,
    and bounded."""
    if re.search(r"<(!doctype|html|head|body)\b", message, re.IGNORECASE):
        message = re.sub(r"<[^>]*>", " ", message)
        message = re.sub(r"\s+", " ", message).strip() + " (an HTML page)"
    message = re.sub(r"\s+", " ", message).strip()
    if len(message) > MESSAGE_CHARS_MAX:
        message = message[: MESSAGE_CHARS_MAX - 1] + "…"
    return message


def describe_error(exc: BaseException) -> str:
    """The one line a user reads for an error that ends a command."""
    if isinstance(exc, LongcallError):
        return one_line(str(exc))
    if isinstance(exc, OSError) and exc.strerror:
        where = f" ({exc.filename})" if exc.filename else ""
        return one_line(f"{exc.strerror}{where}")
    return one_line(
        f"unexpected {type(exc).__name__}: {exc} (rerun with --debug for the traceback)"
    )


def fail(message: str, code: ExitCode) -> NoReturn:
    """End the command with a one-line message on stderr and ``code``."""
    click.echo(f"longcall: {message}", err=True)
    raise click.exceptions.Exit(int(code))


# --- reading the command line ---------------------------------------------------------


def parse_json(text: str, option: str) -> Any:
    """A JSON value from an option, refused (a usage error) when it is not plain JSON:
    not JSON, NaN or Infinity, a name twice in one object, nested too deeply, or a lone
    surrogate."""

    def no_constants(name: str) -> Any:
        raise ValueError(f"{name} is not a JSON number")

    def no_repeated_names(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
        # Which of two values a reader keeps is up to the reader: say so, never pick.
        seen: set[str] = set()
        for name, _ in pairs:
            if name in seen:
                raise ValueError(f"the name {name!r} appears twice in one object")
            seen.add(name)
        return dict(pairs)

    try:
        value = json.loads(text, parse_constant=no_constants, object_pairs_hook=no_repeated_names)
        canonical_json(value)
    except RecursionError:
        raise click.BadParameter("nested too deeply", param_hint=option) from None
    except UnicodeEncodeError:
        raise click.BadParameter(
            "contains a lone surrogate (not valid UTF-8)", param_hint=option
        ) from None
    except ValueError as exc:
        raise click.BadParameter(f"not JSON: {one_line(str(exc))}", param_hint=option) from None
    return value


def parse_fields(items: Sequence[str], option: str) -> dict[str, str]:
    """``FIELD=VALUE`` pairs (the value stays text: the form's type reads it)."""
    fields: dict[str, str] = {}
    for item in items:
        name, sep, value = item.partition("=")
        if not sep or not name:
            raise click.BadParameter(
                f"{item!r}: use FIELD=VALUE, e.g. approved=true", param_hint=option
            )
        fields[name.strip()] = value
    return fields


def ledger_shown(ledger_url: str | None) -> str:
    """``--ledger URL`` to repeat in a ready-to-paste command ('' for the default)."""
    if ledger_url is None or ledger_url == os.environ.get(LEDGER_ENV):
        return ""
    return f" --ledger {_quote(ledger_url)}"


def _quote(text: str) -> str:
    return text if re.fullmatch(r"[\w@%+=:,./-]+", text) else "'" + text.replace("'", "'\\''") + "'"


ledger_option = click.option(
    "--ledger",
    "ledger_url",
    default=None,
    metavar="URL",
    help=f"Ledger URL: sqlite:///PATH or postgresql://… (default: ${LEDGER_ENV}, else a"
    " file in your data directory; `longcall ops where` prints it).",
)
LONGEST_WAIT_S = 10 * 365 * 86_400.0
"""The longest wait or budget a command takes (ten years): beyond what a thread's or the
event loop's timer can hold, a number is a mistake, not a wait."""
LONGEST_LEASE_S = 86_400.0
"""A lease longer than a day would leave a stopped worker's operations for that long."""


class FiniteFloatRange(click.FloatRange):
    """click's ``FloatRange`` that also refuses NaN and the infinities: a NaN compares
    false with every bound, so it passes them, and would reach a record or a timer."""

    name = "number"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        number = super().convert(value, param, ctx)
        if not math.isfinite(number):
            self.fail(f"{value!r} is not a finite number", param, ctx)
        return number


json_option = click.option("--json", "as_json", is_flag=True, help="Print JSON for machines.")
quiet_option = click.option("--quiet", "-q", is_flag=True, help="No progress or log lines.")
qps_option = click.option(
    "--qps",
    type=FiniteFloatRange(min=0, min_open=True),
    default=20.0,
    show_default=True,
    help="At most this many status polls per second per server (shared by every worker"
    " of the ledger).",
)


servers_option = click.option(
    "--servers",
    "servers_path",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    envvar=SERVERS_ENV,
    help="Servers file: TOML, or the mcpServers JSON of MCP hosts; servers by name, with"
    f" their headers and tokens (default: ${SERVERS_ENV}, else servers.toml in your"
    " config directory if it exists).",
)


def client_for(
    ledger_url: str | None,
    *,
    create: bool,
    connects: bool = False,
    servers_path: Path | None = None,
    sign_in: bool = False,
    **options: Any,
) -> Client:
    """A client on the ledger; one that ``connects`` to servers knows the servers file's
    servers, and with ``sign_in`` an OAuth login that needs a person shows them the
    address on stderr. Commands that only read the ledger never read the servers file."""
    announce = None
    if sign_in:

        def announce(url: str) -> None:
            err_console().print(
                f"longcall: the server asks you to sign in; open this address:\n{url}",
                soft_wrap=True,
            )

    return Client(
        ledger_url,
        create_ledger=create,
        servers=servers_from(servers_path) if connects else None,
        announce=announce,
        **options,
    )


def servers_from(path: Path | None) -> ServersConfig:
    """The servers file named, or the default one if it exists, or none."""
    if path is None:
        default = default_servers_path()
        try:
            if not default.is_file():
                return ServersConfig()
        except OSError:  # a config directory we may not even look into: none configured
            return ServersConfig()
        path = default
    return load_servers(path)


@contextlib.contextmanager
def on_the_ledger(ledger_url: str | None) -> Iterator[Client]:
    """A client for commands that act on recorded call nodes: it never creates a ledger
    and starts no driver (a running worker carries out what they write)."""
    client = client_for(ledger_url, create=False)
    try:
        yield client
    finally:
        client.close()


# --- what people read -----------------------------------------------------------------

OUTCOME_STYLE = {
    CallOutcome.OK: "green",
    CallOutcome.TOOL_ERROR: "red",
    CallOutcome.PROTOCOL_ERROR: "red",
    CallOutcome.CANCELLED: "yellow",
    CallOutcome.NEEDS_PERSON: "bold magenta",
    CallOutcome.PENDING: "cyan",
}


def out_console() -> Console:
    return Console(highlight=False)


def err_console() -> Console:
    return Console(stderr=True, highlight=False)


def outcome_text(outcome: CallOutcome) -> str:
    return f"[{OUTCOME_STYLE[outcome]}]{outcome.value}[/]"


def answer_command(request: InputRequest, ledger_url: str | None) -> str:
    """A ready-to-paste ``longcall ops answer`` for the round (example values to edit)."""
    node = _quote(request.call_node_id)
    where = ledger_shown(ledger_url)
    if len(request.questions) == 1 and request.questions[0].is_form:
        fields = [f for f in request.questions[0].fields if f.required] or list(
            request.questions[0].fields
        )
        pairs = " ".join(f"{f.name}={_quote(f.example())}" for f in fields)
        return f"longcall ops answer {node} {pairs}{where}".replace("  ", " ")
    key = _quote(request.questions[0].key)
    return f'longcall ops answer {node} --key {key} --json \'{{"action": "accept", …}}\'{where}'


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
    node = _quote(result.call_node_id)
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


def print_result(result: CallResult, *, as_json: bool, ledger_url: str | None) -> None:
    """A call node for people (a table on stdout, the next step on stderr) or machines."""
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
        ]
        for name, value in rows:
            if value not in (None, "", [], ()):
                text = value if isinstance(value, str) else json.dumps(value, indent=2)
                table.add_row(name, escape(text))
        out_console().print(table)
    console = err_console()
    if result.input is not None:
        for line in input_lines(result.input, ledger_url):
            console.print(escape(line), soft_wrap=True)
    step = next_step(result, ledger_url)
    if step is not None:
        console.print(escape(step), soft_wrap=True)


def outcome_exit(result: CallResult) -> ExitCode:
    return EXIT_OF_OUTCOME[result.outcome]


def run_async(main: Callable[[], Any]) -> Any:
    """Run a coroutine function; Ctrl-C reaches the caller as KeyboardInterrupt."""
    return asyncio.run(main())


# --- longcall call ----------------------------------------------------------------------


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

    def __enter__(self) -> ProgressView:
        self.progress.start()
        self.task = self.progress.add_task(escape(self.node), total=None)
        return self

    def __exit__(self, *exc: object) -> None:
        self.progress.stop()

    def asking(self, lines: Sequence[str]) -> None:
        """Show a question above the bar (or alone, without one), and say the call waits."""
        console = self.progress.console if not self.progress.disable else err_console()
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


def answers_from_fields(request: InputRequest, fields: Mapping[str, str]) -> dict[str, Any] | None:
    """Answers to each form of a round from ``--answer`` fields, when they cover its
    required fields; None (a person decides) otherwise."""
    from longcall.runtime.inputs import answer_from_fields

    if not fields:
        return None
    answers: dict[str, Any] = {}
    for question in request.questions:
        if not question.is_form:
            return None
        known = {f.name for f in question.fields}
        given = {k: v for k, v in fields.items() if k in known}
        if not all(f.name in given for f in question.fields if f.required):
            return None
        answers[question.key] = answer_from_fields(question, given)
    return answers


def ask_a_person(
    view: ProgressView, ledger_url: str | None, fields: Mapping[str, str] | None = None
) -> Callable[[InputRequest], Any]:
    """The input callback of a waiting command: answer from ``--answer`` fields where they
    fit; else show the question and the command that answers it, and leave it to the
    person (who answers from another terminal while this command keeps waiting)."""

    async def on_input(request: InputRequest) -> dict[str, Any] | None:
        answers = answers_from_fields(request, fields or {})
        if answers is not None:
            return answers
        view.asking(input_lines(request, ledger_url))
        return None

    return on_input


@click.command()
@click.argument("url", metavar="SERVER")
@click.argument("tool")
@click.option(
    "--args", "args_json", default="{}", metavar="JSON", help="Tool arguments, a JSON object."
)
@click.option("--node", default=None, help="Call node id (default: from the tool and arguments).")
@ledger_option
@click.option("--wait", is_flag=True, help="Wait until the call is settled and print its result.")
@click.option(
    "--timeout",
    "timeout_s",
    type=FiniteFloatRange(min=0, max=LONGEST_WAIT_S),
    default=None,
    help="With --wait: stop waiting after this many seconds (the call goes on).",
)
@json_option
@quiet_option
@click.option(
    "--protocol",
    default=None,
    help="mcp, 2026-07-28, 2025-11-25, aip-151 or apify (default: from the URL, then negotiated).",
)
@click.option(
    "--budget",
    "budget_s",
    type=FiniteFloatRange(min=0, min_open=True, max=LONGEST_WAIT_S),
    default=None,
    help="Give up waiting for the operation after this many seconds (an operator then decides).",
)
@qps_option
@click.option(
    "--answer",
    "answers",
    multiple=True,
    metavar="FIELD=VALUE",
    help="With --wait, answer the tool's form: FIELD=VALUE per field, e.g. approved=true"
    " (repeatable).",
)
@servers_option
@click.pass_context
def call(
    ctx: click.Context,
    url: str,
    tool: str,
    args_json: str,
    node: str | None,
    ledger_url: str | None,
    wait: bool,
    timeout_s: float | None,
    as_json: bool,
    quiet: bool,
    protocol: str | None,
    budget_s: float | None,
    qps: float,
    answers: tuple[str, ...],
    servers_path: Path | None,
) -> None:
    """Call TOOL at SERVER durably (a URL, or a name from the servers file); with --wait,
    until it is settled.

    Calling the same node again with the same URL, tool and arguments attaches to its
    operation (or prints its receipt) and never submits twice; anything else on that
    node is refused. Without --wait the command returns once the server holds the
    operation, and `longcall worker` or `longcall ops wait NODE` drives it on.

    With --wait, a question the tool asks is answered from --answer fields when they
    fit; otherwise it is shown with the `longcall ops answer` command that answers it,
    and the call waits for that answer (given from another terminal).

    \b
    Examples:
      longcall call http://127.0.0.1:8765/mcp sleep_report --args '{"seconds": 5, "rows": 3}' --wait
      longcall call http://127.0.0.1:8765/mcp approve --args '{"change": "x"}' \
          --answer approved=true --wait
      longcall call http://127.0.0.1:8765/v1 crawl --args '{"pages": 2, "items_per_page": 5}'
      longcall call reports sleep_report --servers servers.toml --wait   # a configured name
    """
    arguments = parse_json(args_json, "--args")
    if not isinstance(arguments, dict):
        raise click.BadParameter("must be a JSON object", param_hint="--args")
    fields = parse_fields(answers, "--answer")
    from longcall.client import checked_arguments, default_node_id

    try:
        arguments = checked_arguments(arguments)
    except InvalidArguments as exc:
        raise click.BadParameter(str(exc), param_hint="--args") from None
    # A server that cannot be named (a malformed URL, an unknown name) is refused
    # before the ledger is opened, or made.
    servers_from(servers_path).resolve(url)
    node = default_node_id(tool, arguments) if node is None else node
    check_call_node_id(node)  # an empty --node too: it is not "no --node"
    ctx.meta[RESUME_KEY] = f"longcall ops wait {_quote(node)}{ledger_shown(ledger_url)}"
    view = ProgressView(node, enabled=wait and not quiet)

    async def main() -> CallResult:
        async with client_for(
            ledger_url,
            create=True,
            connects=True,
            servers_path=servers_path,
            sign_in=True,
            poll_qps_max=qps,
            on_progress=view.update,
            on_input=ask_a_person(view, ledger_url, fields) if wait or fields else None,
        ) as client:
            with view:
                return await client.call(
                    url,
                    tool,
                    arguments,
                    node=node,
                    protocol=protocol,
                    wait=wait,
                    through_input=True,
                    budget_s=budget_s,
                    timeout_s=timeout_s,
                )

    result = run_async(main)
    print_result(result, as_json=as_json, ledger_url=ledger_url)
    if wait or result.settled:
        raise click.exceptions.Exit(int(outcome_exit(result)))


# --- longcall worker --------------------------------------------------------------------


def worker_line(result: CallResult, previous: State | None, ledger_url: str | None) -> list[str]:
    """The log lines of one change: one per state change, plus the question of a new
    input round with its ready-to-paste answer."""
    stamp = time.strftime("%H:%M:%S")
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


def metrics_options(command: Callable[..., Any]) -> Callable[..., Any]:
    """``--metrics-port`` and ``--metrics-host``, the same for a worker and a server."""
    command = click.option(
        "--metrics-host", default="127.0.0.1", show_default=True, help="Metrics interface."
    )(command)
    return click.option(
        "--metrics-port",
        type=click.IntRange(min=0, max=65535),
        default=None,
        help="Serve Prometheus metrics at http://HOST:PORT/metrics, HOST being --metrics-host "
        "(0: any free port).",
    )(command)


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

    def log(result: CallResult, previous: State | None) -> None:
        if not quiet:
            for line in worker_line(result, previous, ledger_url):
                console.print(escape(line), soft_wrap=True)

    unreachable: set[str] = set()

    def log_reachability(progress: CallProgress) -> None:
        """A server that stops answering (and answers again) is a line too: its
        operations wait without a state change, retried with backoff."""
        node, stamp = progress.call_node_id, time.strftime("%H:%M:%S")
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

    async def main() -> list[CallResult]:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        loop.add_signal_handler(signal.SIGTERM, stop.set)
        async with client_for(
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
        ) as client:
            if metrics_port is not None:
                client.executor.metrics.serve(metrics_port, host=metrics_host)
                console.print(f"worker: metrics at {client.executor.metrics.url}")
            if not quiet:
                where = ledger_url or default_ledger_url()
                console.print(
                    escape(f"worker: driving the open operations of {where}"), soft_wrap=True
                )
            driving = asyncio.ensure_future(client.drive(until_idle=until_idle))
            stopping = asyncio.ensure_future(stop.wait())
            try:
                await asyncio.wait({driving, stopping}, return_when=asyncio.FIRST_COMPLETED)
            finally:
                stopping.cancel()
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


# --- longcall ops -----------------------------------------------------------------------


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


@ops.command("list")
@ledger_option
@click.option(
    "--state",
    "states",
    multiple=True,
    type=click.Choice([s.value for s in State]),
    help="Only operations in this state (repeatable).",
)
@json_option
def ops_list(ledger_url: str | None, states: tuple[str, ...], as_json: bool) -> None:
    """List the operations of the ledger, oldest first.

    \b
    Examples:
      longcall ops list
      longcall ops list --state input_required --state reconciliation_required
    """
    with on_the_ledger(ledger_url) as client:
        results = client.results(*(State(s) for s in states))
    if as_json:
        click.echo(json.dumps([r.to_json() for r in results], indent=2, sort_keys=True))
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
    for node, outcome, state, tool, note in rows:
        cells = [
            escape(node.ljust(widths[0])),
            f"[{OUTCOME_STYLE[outcome]}]{outcome.value.ljust(widths[1])}[/]",
            state.ljust(widths[2]),
            escape(tool.ljust(widths[3])),
            escape(note),
        ]
        console.print("  ".join(cells).rstrip(), soft_wrap=True)
    console.print(f"{len(rows)} operation(s)", style="dim", soft_wrap=True)


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
    with on_the_ledger(ledger_url) as client:
        result = client.result(node)
        history = client.history(node)
    if as_json:
        rows = history if limit == 0 else history[-limit:]
        view = result.to_json()
        view["history"] = [
            {"version": h.version, "state": h.state.value, "event": h.event, "at_utc": h.at_utc}
            for h in rows
        ]
        view["history_total"] = len(history)
        click.echo(json.dumps(view, indent=2, sort_keys=True))
        return
    print_result(result, as_json=False, ledger_url=ledger_url)
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
    ctx.meta[RESUME_KEY] = f"longcall ops wait {_quote(node)}{ledger_shown(ledger_url)}"
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
    print_result(result, as_json=as_json, ledger_url=ledger_url)
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
    "--json",
    "answer_json",
    default=None,
    metavar="JSON",
    help='A whole answer, e.g. \'{"action": "accept", "content": {…}}\'.',
)
@click.option("--decline", is_flag=True, help="Answer no.")
@click.option("--cancel", "dismiss", is_flag=True, help="Dismiss the question without a choice.")
@ledger_option
def ops_answer(
    node: str,
    fields: tuple[str, ...],
    key: str | None,
    answer_json: str | None,
    decline: bool,
    dismiss: bool,
    ledger_url: str | None,
) -> None:
    """Answer the question NODE waits for, by field name; the answer is checked against
    the form before it is stored, and a running driver sends it within a second.

    \b
    Examples:
      longcall ops answer gate approved=true
      longcall ops answer gate --decline
      longcall ops answer gate --key elicit-1 \
          --json '{"action": "accept", "content": {"approved": false}}'
    """
    chosen = sum(bool(x) for x in (fields, answer_json, decline, dismiss))
    if chosen != 1:
        raise click.UsageError("give FIELD=VALUE pairs, or --json, or --decline, or --cancel")
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
                body = parse_json(answer_json, "--json")
            else:
                body = {"action": "decline" if decline else "cancel"}
            keys = [key] if key is not None else list(request.keys)
            if len(keys) > 1:
                raise InvalidAnswer(f"{node!r} waits for {', '.join(keys)}: name one with --key")
            run_async(lambda: client.answer(node, {keys[0]: body}))
        after = client.result(node)
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
def ops_reconcile(
    node: str,
    resolution: str,
    note: str,
    actor: str,
    operation_id: str | None,
    result_json: str | None,
    ledger_url: str | None,
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
    click.echo(f"{node}: {after.state.value} (by {actor}: {note})")


__all__ = [
    "EXIT_CODES_HELP",
    "RESUME_KEY",
    "ExitCode",
    "call",
    "describe_error",
    "exit_code_of",
    "one_line",
    "ops",
    "worker",
]
