"""What every ``longcall`` command shares: exit codes, one-line errors, reading the
command line, the common options, and the client a command acts through (SPEC O1).

Must not: decide anything (a command asks :class:`longcall.Client`), cite requirement
ids in what a user reads, or print for people (that is :mod:`longcall.cli.show`).
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import json
import math
import os
import re
import sys
from collections.abc import Callable, Coroutine, Iterator, Sequence
from pathlib import Path
from typing import Any, NoReturn

import click
from rich.console import Console

from longcall.adapters.servers import (
    SERVERS_ENV,
    ServersConfig,
    default_servers_path,
    load_servers,
)
from longcall.client import (
    LEDGER_ENV,
    CallOutcome,
    CallResult,
    Client,
)
from longcall.core.keys import canonical_json
from longcall.errors import (
    AdapterError,
    ConfigError,
    ConflictError,
    IntegrityError,
    InvalidArguments,
    InvalidCallNode,
    LedgerMissing,
    LocalProtocolError,
    LongcallError,
    MissingCredential,
    NotFoundError,
    ServerUnreachable,
    UnavailableError,
    UnsupportedLedgerURL,
    UsageError,
)

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
    """Ctrl-C: only local waiting stopped; a recorded call goes on."""


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
  130  interrupted (Ctrl-C): a recorded call goes on (the last line says how to
       resume it); one interrupted before it was recorded was never sent
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
STOPPED_KEY = "longcall.stopped"
"""Where a server command leaves what its Ctrl-C line says (ctx.meta): a callable, called
once the server has stopped, so that the line can say what the stop handed back."""
UNRECORDED_KEY = "longcall.unrecorded"
"""Where a command that records a call leaves a check for the Ctrl-C handler: true
while the ledger holds no record of it (then nothing was sent)."""
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


def plural(count: int, noun: str) -> str:
    """``1 mutant``, ``2 mutants``: a count and its noun, agreed."""
    return f"{count} {noun}{'' if count == 1 else 's'}"


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


def read_argument_text(value: str, option: str) -> str:
    """An option's JSON text as given, or read from a file (``@PATH``) or stdin (``-``):
    arguments too large for a command line (a usage error when they cannot be read)."""
    if value == "-":
        return sys.stdin.read()
    if not value.startswith("@"):
        return value
    path = Path(value[1:])
    try:
        return path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        why = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        raise click.BadParameter(f"cannot read {path}: {why}", param_hint=option) from None


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
    return f" --ledger {shell_quote(ledger_url)}"


def shell_quote(text: str) -> str:
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


class Age(click.ParamType):  # type: ignore[type-arg]  # generic in click 8.2+, not in 8.1
    """An age such as ``90s``, ``10m``, ``2h``, ``1d`` or ``1h30m``, as seconds."""

    name = "age"
    UNIT_S = {"s": 1, "m": 60, "h": 3_600, "d": 86_400, "w": 604_800}
    PART = re.compile(r"(\d+(?:\.\d+)?)([smhdw])")

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        if isinstance(value, float):
            return value
        text = str(value).strip().lower()
        parts = self.PART.findall(text)
        if not text or "".join(number + unit for number, unit in parts) != text:
            self.fail(f"{value!r} is not an age (examples: 90s, 10m, 2h, 1d, 1h30m)", param, ctx)
        return float(sum(float(number) * self.UNIT_S[unit] for number, unit in parts))


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


def unrecorded_check(ledger_url: str | None, node: str) -> Callable[[], bool]:
    """Whether the ledger holds no record of ``node`` (no ledger at all counts as none):
    read when Ctrl-C arrives, after every ledger write in flight has ended."""

    def unrecorded() -> bool:
        try:
            with on_the_ledger(ledger_url) as client:
                return client.ledger.find(node) is None
        except LedgerMissing:
            return True
        except LongcallError:
            return False  # cannot tell: say how to resume, which says what it finds

    return unrecorded


@contextlib.contextmanager
def on_the_ledger(ledger_url: str | None) -> Iterator[Client]:
    """A client for commands that act on recorded call nodes: it never creates a ledger
    and starts no driver (a running worker carries out what they write)."""
    client = client_for(ledger_url, create=False)
    try:
        yield client
    finally:
        client.close()


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


def out_console() -> Console:
    return Console(highlight=False)


def err_console() -> Console:
    return Console(stderr=True, highlight=False)


def outcome_exit(result: CallResult) -> ExitCode:
    return EXIT_OF_OUTCOME[result.outcome]


def run_async(main: Callable[[], Any]) -> Any:
    """Run a coroutine function; Ctrl-C reaches the caller as KeyboardInterrupt."""
    return asyncio.run(main())


# ---- the webhook receiver (worker, call --wait) ----------------------------------------------


def webhook_listen_option(command: Callable[..., Any]) -> Callable[..., Any]:
    """``--webhook-listen HOST:PORT``: serve the webhook receiver beside the command."""
    return click.option(
        "--webhook-listen",
        "webhook_listen",
        metavar="HOST:PORT",
        help="Also take signed webhook deliveries as POST /webhooks there (and POST "
        "/webhooks/NAME for a server with its own webhook key in the servers file); each "
        "verified one only makes the operation it names poll sooner. Default key(s) from "
        "$LONGCALL_WEBHOOK_SECRET.",
    )(command)


def webhook_address(text: str) -> tuple[str, int]:
    """``HOST:PORT`` of ``--webhook-listen`` (``[::1]:8080`` for IPv6), or a usage error."""
    host, sep, port = text.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise click.BadParameter(f"expected HOST:PORT, got {text!r}", param_hint="--webhook-listen")
    return host, int(port)


def open_webhooks(client: Client, host: str, port: int) -> Coroutine[Any, Any, None]:
    """The webhook receiver's keys read and its socket bound now (so a missing key or a
    taken port is the command's error at start), and its serving, to be scheduled."""
    from longcall.runtime.webhooks import listen_socket, serve

    receiver = client.webhook_receiver()
    sock = listen_socket(host, port)
    bound = sock.getsockname()
    shown = f"[{host.strip('[]')}]" if ":" in host else host
    err_console().print(f"webhooks at http://{shown}:{bound[1]}/webhooks")
    return serve(receiver, sock)
