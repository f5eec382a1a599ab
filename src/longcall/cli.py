"""The ``longcall`` command: one entry point for every part (SPEC O1).

Owns: the command group, its options (``-h``, ``--debug``), and the one place where an
error that ends a command becomes one line on stderr and a documented exit status
(:class:`~longcall.caller.ExitCode`); Ctrl-C says how to resume and exits 130.
Subcommands live next to the part they drive and are imported lazily, so that
``longcall --help`` stays fast and a missing optional dependency only affects its own
command.
"""

from __future__ import annotations

import os
import re
from typing import Any

import click
from click.core import ParameterSource

from longcall.caller import (
    EXIT_CODES_HELP,
    LONGEST_LEASE_S,
    RESUME_KEY,
    ExitCode,
    FiniteFloatRange,
    call,
    describe_error,
    exit_code_of,
    metrics_options,
    ops,
    worker,
)
from longcall.rollout_cli import rollout

DEBUG_ENV = "LONGCALL_DEBUG"
DRIVE_CALLS = ("call", "worker", "ops")
"""The commands whose calls go on at their servers when the command is interrupted."""


class LongcallGroup(click.Group):
    """A group whose commands end in one-line errors and documented exit codes."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        # Bytes that are not UTF-8 reach Python as lone surrogates, which no ledger
        # row, JSON body or terminal can hold: one usage error here, for every command.
        ctx.meta[_NOT_TEXT] = next((a for a in args if _has_surrogate(a)), None)
        return super().parse_args(ctx, args)

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
            resume = _meta(ctx, RESUME_KEY)
            click.echo("", err=True)
            if ctx.invoked_subcommand in DRIVE_CALLS:
                click.echo(
                    "longcall: interrupted; only local waiting stopped, the call goes on."
                    + (f" Resume with: {resume}" if resume else ""),
                    err=True,
                )
            else:  # a server, the simulator, a plan change: nothing goes on elsewhere
                click.echo("longcall: interrupted", err=True)
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
      longcall call http://127.0.0.1:8765/mcp sleep_report --args '{"seconds": 5, "rows": 3}' --wait
      longcall ops list
    """
    ctx.meta["longcall.debug"] = debug


@main.command()
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
    if walkthrough:
        from longcall.demo.walkthrough import run_walkthrough

        raise SystemExit(run_walkthrough())
    from longcall.demo import run_demo

    raise SystemExit(run_demo())


@main.command()
@click.option(
    "--store",
    "store_url",
    default=None,
    help="Task store URL (sqlite:///PATH, or postgresql://... shared by several servers).",
)
@click.option("--host", default="127.0.0.1", show_default=True, help="Interface to bind.")
@click.option(
    "--port", default=8765, show_default=True, type=click.IntRange(0, 65535), help="Port to bind."
)
@click.option(
    "--lease-seconds",
    default=15.0,
    show_default=True,
    type=FiniteFloatRange(min=0.5, max=LONGEST_LEASE_S),
    help="How long another server on the same store waits before taking over a task"
    " whose server stopped.",
)
@click.option(
    "--allowed-origin", multiple=True, help="An Origin to serve besides loopback ones (repeat)."
)
@click.option(
    "--allowed-host", multiple=True, help="A Host name to serve besides loopback ones (repeat)."
)
@click.option(
    "--stateful",
    is_flag=True,
    help="Issue 2025-11-25 sessions (Mcp-Session-Id); stateless by default.",
)
@click.option(
    "--max-open-tasks",
    default=1000,  # the server's own default, written here so the CLI starts without it
    show_default=True,
    type=click.IntRange(min=1),
    help="Tasks one caller may hold open at once; past it a new task is refused (429)"
    " until some end.",
)
@metrics_options
def serve(
    store_url: str | None,
    host: str,
    port: int,
    lease_seconds: float,
    allowed_origin: tuple[str, ...],
    allowed_host: tuple[str, ...],
    stateful: bool,
    max_open_tasks: int,
    metrics_port: int | None,
    metrics_host: str,
) -> None:
    """Serve the reference long-running tools: MCP at http://HOST:PORT/mcp, AIP-151 at
    /v1, Apify-style at /apify/mcp.

    \b
    Examples:
      longcall serve --port 8765
      longcall serve --store sqlite:///tasks.db --host 0.0.0.0 --allowed-host tools.example
      longcall serve --metrics-port 9464
    """
    from longcall.errors import MetricsPortUnavailable
    from longcall.server.cli import run_reference_server, start_failure

    try:
        run_reference_server(
            store_url=store_url,
            host=host,
            port=port,
            lease_s=lease_seconds,
            allowed_origins=allowed_origin,
            allowed_hosts=allowed_host,
            stateful=stateful,
            metrics_port=metrics_port,
            metrics_host=metrics_host,
            max_open_tasks=max_open_tasks,
        )
    except (MetricsPortUnavailable, OSError) as exc:
        raise click.ClickException(start_failure(exc, host, port)) from None


@main.command()
@click.option("--permutations", default="1000", show_default=True, help="How many (>= 1).")
@click.option("--seed", default="0", show_default=True, help="Seed of the run (an integer >= 0).")
@click.option(
    "--profile", default="default", show_default=True, help="Fault mix: gentle, default or harsh."
)
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object (the gate report).")
@click.option("--replay", "replay_seed", default=None, help="Rerun one permutation by its seed.")
@click.option(
    "--mutants",
    "mutant_table",
    is_flag=True,
    help="Plant each known bug in the real code and show which gate catches it.",
)
@click.option("--mutant", "mutant_names", multiple=True, help="Only this mutant (repeatable).")
@click.pass_context
def sim(
    ctx: click.Context,
    permutations: str,
    seed: str,
    profile: str,
    as_json: bool,
    replay_seed: str | None,
    mutant_table: bool,
    mutant_names: tuple[str, ...],
) -> None:
    """Run the deterministic fault-injection simulator and judge the release gates.

    \b
    Examples:
      longcall sim --permutations 10000
      longcall sim --replay 1234
      longcall sim --mutants
    """
    from longcall.sim.config import PROFILES
    from longcall.sim.console import replay, run_mutants, run_sim

    _refuse_together(ctx, "replay_seed", "permutations", "seed", "as_json", "mutant_table",
                     "mutant_names")  # fmt: skip
    _refuse_together(ctx, "mutant_table", "permutations", "as_json")
    _refuse_together(ctx, "mutant_names", "permutations", "as_json")
    count = _whole_number(permutations, "--permutations", minimum=1, maximum=MAX_PERMUTATIONS)
    run_seed = _whole_number(seed, "--seed", minimum=0)
    chosen = PROFILES.get(profile)
    if chosen is None:
        raise click.BadParameter(
            f"unknown profile {profile!r}; choose one of {', '.join(PROFILES)}",
            param_hint="--profile",
        )
    if replay_seed is not None:
        seed_of_one = _whole_number(replay_seed, "--replay", minimum=0)
        raise SystemExit(replay(seed_of_one, profile=chosen))
    if mutant_table or mutant_names:
        from longcall.sim.mutants import UnknownMutant

        try:
            code = run_mutants(list(mutant_names), seed=run_seed, profile=chosen)
        except UnknownMutant as exc:
            raise click.BadParameter(str(exc), param_hint="--mutant") from exc
        raise SystemExit(code)
    raise SystemExit(run_sim(count, seed=run_seed, as_json=as_json, profile=chosen))


MAX_PERMUTATIONS = 1_000_000
"""About an hour on two cores; a larger count is a typo, not a run."""


def _whole_number(text: str, option: str, *, minimum: int, maximum: int | None = None) -> int:
    """An option's whole number (plain ASCII digits, as it is printed back in a replay
    command), or a usage error naming the option."""
    if not re.fullmatch(r"-?[0-9]+", text.strip()):
        raise click.BadParameter(f"{text!r} is not a whole number", param_hint=option)
    value = int(text)
    if value < minimum:
        raise click.BadParameter(f"{value} is below {minimum}", param_hint=option)
    if maximum is not None and value > maximum:
        raise click.BadParameter(f"{value} is above {maximum:,}", param_hint=option)
    return value


def _refuse_together(ctx: click.Context, chosen: str, *others: str) -> None:
    """A usage error when ``chosen`` was given with an option it would ignore."""
    given = {
        param.name: "/".join(param.opts)
        for param in ctx.command.params
        if param.name is not None
        and ctx.get_parameter_source(param.name) is ParameterSource.COMMANDLINE
    }
    if chosen not in given:
        return
    ignored = [given[name] for name in others if name in given]
    if ignored:
        raise click.UsageError(f"{given[chosen]} does not take {', '.join(ignored)}", ctx)


main.add_command(call)
main.add_command(worker)
main.add_command(ops)
main.add_command(rollout)
