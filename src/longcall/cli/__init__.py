"""The ``longcall`` command: one entry point for every part (SPEC O1).

Owns: the command group, its options (``-h``, ``--debug``), and the one place where an
error that ends a command becomes one line on stderr and a documented exit status
(:class:`~longcall.cli.common.ExitCode`); Ctrl-C says how to resume and exits 130.

The package holds every command, one module per command group (``call``, ``tools``,
``worker``, ``ops``, ``rollout``, ``serve``, ``sim``, ``demo``, ``console``), each a thin
layer over a public API. A command module imports what it drives (the server library,
the simulator, the executor) only when the command runs, so that ``longcall --help``
stays fast and a missing optional dependency only affects its own command.
"""

from __future__ import annotations

import os
from typing import Any

import click

from longcall.cli import call, console, demo, gateway, ops, rollout, serve, sim, tools, worker
from longcall.cli.common import (
    EXIT_CODES_HELP,
    RESUME_KEY,
    STOPPED_KEY,
    UNRECORDED_KEY,
    ExitCode,
    describe_error,
    exit_code_of,
)
from longcall.entry import BEFORE_THE_COMMAND

DEBUG_ENV = "LONGCALL_DEBUG"
DRIVE_CALLS = ("call", "ops")
"""The commands whose call goes on at its server when the command is interrupted."""


class LongcallGroup(click.Group):
    """A group whose commands end in one-line errors and documented exit codes."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        # Bytes that are not UTF-8 reach Python as lone surrogates, which no ledger
        # row, JSON body or terminal can hold: one usage error here, for every command.
        ctx.meta[_NOT_TEXT] = next((a for a in args if _has_surrogate(a)), None)
        return super().parse_args(ctx, args)

    def make_context(
        self,
        info_name: str | None,
        args: list[str],
        parent: click.Context | None = None,
        **extra: Any,
    ) -> click.Context:
        # Ctrl-C while the command line is read: nothing ran yet (click would say
        # "Aborted!" and exit 1).
        try:
            return super().make_context(info_name, args, parent, **extra)
        except KeyboardInterrupt:
            click.echo("", err=True)
            click.echo(f"longcall: {BEFORE_THE_COMMAND}", err=True)
            raise click.exceptions.Exit(int(ExitCode.INTERRUPTED)) from None

    def invoke(self, ctx: click.Context) -> Any:
        bad = ctx.meta.get(_NOT_TEXT)
        if bad is not None:
            raw = bad.encode("utf-8", "surrogateescape" if _escaped(bad) else "backslashreplace")
            shown = raw.decode("utf-8", "backslashreplace")
            click.echo(f"longcall: the argument '{shown}' is not UTF-8 text", err=True)
            ctx.exit(int(ExitCode.USAGE))
        try:
            return super().invoke(ctx)
        except (click.exceptions.Exit, click.exceptions.Abort):
            raise
        except click.UsageError as exc:
            where = exc.ctx.command_path if exc.ctx is not None else "longcall"
            click.echo(f"longcall: {exc.format_message()} (see: {where} --help)", err=True)
            ctx.exit(int(ExitCode.USAGE))
        except click.ClickException as exc:
            click.echo(f"longcall: {exc.format_message()}", err=True)
            ctx.exit(exc.exit_code)
        except KeyboardInterrupt:
            click.echo("", err=True)
            click.echo(f"longcall: {interrupted_line(ctx)}", err=True)
            ctx.exit(int(ExitCode.INTERRUPTED))
        except Exception as exc:
            if ctx.meta.get("longcall.debug"):
                raise
            click.echo(f"longcall: {describe_error(exc)}", err=True)
            ctx.exit(int(exit_code_of(exc)))


_NOT_TEXT = "longcall.not_text"


def _has_surrogate(text: str) -> bool:
    return any("\ud800" <= ch <= "\udfff" for ch in text)


def _escaped(text: str) -> bool:
    """Whether every surrogate stands for an undecodable byte (as the OS hands them over)."""
    return all(not "\ud800" <= ch <= "\udfff" or "\udc80" <= ch <= "\udcff" for ch in text)


def interrupted_line(ctx: click.Context) -> str:
    """What Ctrl-C stopped, as the ledger has it: a call node never recorded was never
    sent; a recorded one goes on (and the line says how to resume it); a worker's
    operations go on with the next worker; a server says what it stopped and what its
    store keeps; anything else stopped here."""
    command = ctx.invoked_subcommand
    if command == "worker":
        restart = _meta(ctx, RESUME_KEY)
        return (
            "interrupted; the worker stopped. Its operations go on at their servers and"
            " the next worker on this ledger carries them on"
            + (f" (restart it with: {restart})" if restart else "")
        )
    stopped = _meta(ctx, STOPPED_KEY)
    if stopped is not None:  # a server, once it has stopped
        return str(stopped())
    if command not in DRIVE_CALLS:  # the simulator, a plan change
        return "interrupted"
    unrecorded = _meta(ctx, UNRECORDED_KEY)
    if unrecorded is not None and unrecorded():
        return "interrupted before the call was recorded: nothing was sent"
    resume = _meta(ctx, RESUME_KEY)
    return "interrupted; only local waiting stopped, the call goes on." + (
        f" Resume with: {resume}" if resume else ""
    )


def _meta(ctx: click.Context, key: str) -> Any:
    """A value any subcommand's context left in the shared meta."""
    return ctx.meta.get(key)


@click.group(
    cls=LongcallGroup,
    context_settings={"help_option_names": ["-h", "--help"]},
    epilog=EXIT_CODES_HELP,
)
@click.version_option(package_name="longcall")
@click.option(
    "--debug",
    is_flag=True,
    default=lambda: os.environ.get(DEBUG_ENV, "").strip().lower() not in ("", "0", "false", "no"),
    help=f"Show the full traceback of an error (also ${DEBUG_ENV}=1).",
)
@click.pass_context
def main(ctx: click.Context, debug: bool) -> None:
    """Durable long-running tool calls: exactly one accepted terminal outcome per call.

    \b
    Examples:
      longcall serve --port 8765 &
      longcall tools http://127.0.0.1:8765/mcp
      longcall call http://127.0.0.1:8765/mcp sleep_report --args '{"seconds": 5, "rows": 3}' --wait
      longcall ops list
    """
    ctx.meta["longcall.debug"] = debug


# ``longcall.cli.NAME`` stays the module; each holds the command of its name.
for _module in (call, tools, worker, ops, rollout, serve, sim, demo, console, gateway):
    main.add_command(getattr(_module, _module.__name__.rpartition(".")[2]))

__all__ = ["ExitCode", "main"]
