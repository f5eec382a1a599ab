"""``longcall sim``: run the deterministic fault-injection simulator, judge the release
gates, and print them: a progress bar, the gate table, JSON, a replay trace (SPEC F3).

Owns: the options and the presentation of :mod:`longcall.sim.report` results (``rich``
tables and progress, or one JSON object) and the exit status (0 only when every gate
holds). Must not: decide anything about the gates themselves.
"""

from __future__ import annotations

import dataclasses
import json
import re
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

import click
from click.core import ParameterSource
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TimeElapsedColumn
from rich.table import Table

from longcall.cli.common import plural

if TYPE_CHECKING:  # the simulator loads when it runs, never for ``longcall --help``
    from longcall.sim.config import Profile
    from longcall.sim.hostworld import HostReport
    from longcall.sim.report import Gate, Report


@click.command()
@click.option("--permutations", default="1000", show_default=True, help="How many (>= 1).")
@click.option("--seed", default="0", show_default=True, help="Seed of the run (an integer >= 0).")
@click.option(
    "--profile", default="default", show_default=True, help="Fault mix: gentle, default or harsh."
)
@click.option(
    "--world",
    default="calls",
    show_default=True,
    help="calls: the executor's calls against simulated servers; host: hosts through the gateway.",
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
@click.option(
    "--webhooks",
    is_flag=True,
    help="Servers also send signed webhook deliveries (forged, duplicated, delayed, "
    "reordered, dropped); each world is judged against its poll-only run.",
)
@click.pass_context
def sim(
    ctx: click.Context,
    permutations: str,
    seed: str,
    profile: str,
    world: str,
    as_json: bool,
    replay_seed: str | None,
    mutant_table: bool,
    mutant_names: tuple[str, ...],
    webhooks: bool,
) -> None:
    """Run the deterministic fault-injection simulator and judge the release gates.

    \b
    Examples:
      longcall sim --permutations 10000
      longcall sim --world host --permutations 10000
      longcall sim --replay 1234
      longcall sim --webhooks --permutations 10000
      longcall sim --mutants
    """
    from longcall.sim.config import PROFILES

    _refuse_together(ctx, "replay_seed", "permutations", "seed", "as_json", "mutant_table",
                     "mutant_names")  # fmt: skip
    _refuse_together(ctx, "mutant_table", "permutations", "as_json", "webhooks", "world")
    _refuse_together(ctx, "mutant_names", "permutations", "as_json", "webhooks", "world")
    _refuse_together(ctx, "webhooks", "world")
    if world not in WORLDS:
        raise click.BadParameter(
            f"unknown world {world!r}; choose one of {', '.join(WORLDS)}", param_hint="--world"
        )
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
        raise SystemExit(replay(seed_of_one, profile=chosen, world=world, webhooks=webhooks))
    if mutant_table or mutant_names:
        from longcall.errors import UnknownMutant

        try:
            code = run_mutants(list(mutant_names), seed=run_seed, profile=chosen)
        except UnknownMutant as exc:
            raise click.BadParameter(str(exc), param_hint="--mutant") from exc
        raise SystemExit(code)
    if world == "host":
        raise SystemExit(run_host_sim(count, seed=run_seed, as_json=as_json, profile=chosen))
    raise SystemExit(
        run_sim(count, seed=run_seed, as_json=as_json, profile=chosen, webhooks=webhooks)
    )


WORLDS = ("calls", "host")
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


def run_sim(
    permutations: int,
    *,
    seed: int,
    as_json: bool,
    profile: Profile,
    console: Console | None = None,
    webhooks: bool = False,
) -> int:
    """Run the permutations, print the report; the exit status says whether all gates hold."""
    from longcall.sim.report import run

    console = console or Console(stderr=as_json)
    if as_json:
        return _print_json(run(permutations, seed=seed, profile=profile, webhooks=webhooks))
    report = _with_progress(
        console,
        "permutations",
        permutations,
        lambda advance: run(
            permutations, seed=seed, profile=profile, on_progress=advance, webhooks=webhooks
        ),
    )
    console.print(gate_table(report.gate_list(), f"release gates (profile {report.profile})"))
    console.print(gate_table(report.structural(), "structural guarantees (schema)"))
    console.print(fault_table(report))
    console.print(workers_table(report))
    if report.webhooks is not None:
        console.print(webhooks_table(report))
    _print_failures(console, report.failures)
    verdict = "[green]every gate holds[/]" if report.ok else "[red]a gate failed[/]"
    console.print(
        f"{report.permutations} permutations (seed {report.seed}) in {report.elapsed_s:.1f} s "
        f"= {report.permutations_per_s:.0f}/s, {report.virtual_hours:.0f} h of virtual time: "
        + verdict
    )
    return 0 if report.ok else 1


def run_host_sim(
    permutations: int,
    *,
    seed: int,
    as_json: bool,
    profile: Profile,
    console: Console | None = None,
) -> int:
    """Run the host worlds, print their gates; the exit status says whether all hold."""
    from longcall.sim.hostworld import run_hosts

    console = console or Console(stderr=as_json)
    workers = 2 if permutations >= 500 else 1
    if as_json:
        return _print_json(run_hosts(permutations, seed=seed, profile=profile, workers=workers))
    report = _with_progress(
        console,
        "host worlds",
        permutations,
        lambda advance: run_hosts(
            permutations, seed=seed, profile=profile, workers=workers, on_progress=advance
        ),
    )
    console.print(gate_table(report.gate_list(), f"host world gates (profile {report.profile})"))
    table = Table(title="hosts and the gateway", title_justify="left")
    table.add_column("measure")
    table.add_column("count", justify="right")
    for name, count in report.counts().items():
        table.add_row(name.replace("_", " "), str(count))
    console.print(table)
    _print_failures(console, report.failures)
    verdict = "[green]every gate holds[/]" if report.ok else "[red]a gate failed[/]"
    console.print(
        f"{report.permutations} host worlds (seed {report.seed}) in {report.elapsed_s:.1f} s, "
        f"{report.virtual_hours:.0f} h of virtual time: " + verdict
    )
    return 0 if report.ok else 1


R = TypeVar("R")


def _print_json(report: Report | HostReport) -> int:
    print(json.dumps(report.as_json(), sort_keys=True))
    return 0 if report.ok else 1


def _print_failures(console: Console, failures: list[dict[str, Any]]) -> None:
    for failure in failures:
        console.print(f"[red]FAIL[/] seed {failure['seed']}: {failure['replay']}")
        for line in failure["violations"]:
            console.print(f"    {line}")


def _with_progress(
    console: Console, label: str, total: int, run: Callable[[Callable[[int], None]], R]
) -> R:
    """``run(advance)`` under a progress bar of ``total`` permutations."""
    with Progress(
        "[progress.description]{task.description}",
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=console,
        transient=False,
    ) as progress:
        task = progress.add_task(label, total=total)
        return run(lambda n: progress.advance(task, n))


def gate_table(gates: list[Gate], title: str) -> Table:
    table = Table(title=title, title_justify="left")
    for column in ("gate", "value", "judged", "holds"):
        table.add_column(column)
    for gate in gates:
        if gate.holds:
            verdict = "[green]yes[/]"
        elif gate.met:
            verdict = "[red]NO (judged nothing)[/]"
        else:
            verdict = "[red]NO[/]"
        table.add_row(gate.name, gate.value, f"{gate.judged} {gate.judged_what}", verdict)
    return table


def fault_table(report: Report) -> Table:
    table = Table(title="faults injected", title_justify="left")
    table.add_column("fault class")
    table.add_column("count", justify="right")
    from longcall.sim.world import FAULT_CLASSES

    for name in FAULT_CLASSES:
        table.add_row(name, str(report.fault_counts.get(name, 0)))
    table.add_row("operator resolutions", str(report.operator_resolutions))
    return table


def workers_table(report: Report) -> Table:
    """The worlds of several workers on one ledger (D1): what their engines counted."""
    table = Table(title="several workers on one ledger", title_justify="left")
    table.add_column("measure")
    table.add_column("count", justify="right")
    table.add_row("worlds of 2-4 workers", str(report.multi_worker_worlds))
    table.add_row("workers started", str(report.workers_started))
    for name, count in report.worker_stats.items():
        table.add_row(name, str(count))
    table.add_row("stale sends", str(report.stale_sends))
    return table


def webhooks_table(report: Report) -> Table:
    """What the webhook deliveries came to, added up over the permutations."""
    assert report.webhooks is not None
    table = Table(title="webhook deliveries", title_justify="left")
    table.add_column("measure")
    table.add_column("count", justify="right")
    for name, count in dataclasses.asdict(report.webhooks).items():
        table.add_row(name.replace("_", " "), str(count))
    return table


def run_mutants(
    names: list[str], *, seed: int, profile: Profile, console: Console | None = None
) -> int:
    """Plant each mutant in the real code, run the seed corpus, print who caught it."""
    from longcall.sim.mutants import CI_PERMUTATIONS, catch_table

    # Wide enough for a row per mutant on one line, even into a pipe.
    console = console or Console(width=max(Console().width, 110))
    catches = catch_table(names or None, seed=seed, profile=profile)
    table = Table(
        title=f"mutants of the real code (seed {seed}, {CI_PERMUTATIONS} permutations, "
        f"profile {profile.name})",
        title_justify="left",
    )
    for column in ("mutant", "caught by", "permutation", "seed"):
        table.add_column(column, no_wrap=True)
    for found in catches:
        table.add_row(
            found.mutant,
            found.check or "[red]NOT CAUGHT[/]",
            "" if found.permutation is None else str(found.permutation),
            "" if found.seed is None else str(found.seed),
        )
    console.print(table)
    for found in catches:
        console.print(f"  {found.mutant}: {found.bug}", highlight=False)
    survivors = [c.mutant for c in catches if not c.caught]
    if survivors:
        console.print(
            f"[red]{plural(len(survivors), 'mutant')} survived:[/] {', '.join(survivors)}"
        )
        return 1
    console.print(f"[green]every mutant is caught[/] ({plural(len(catches), 'mutant')})")
    return 0


def replay(seed: int, *, profile: Profile, world: str = "calls", webhooks: bool = False) -> int:
    """Rerun one permutation and print its event trace, one line per event (``webhooks``:
    the run with webhook deliveries, judged against its poll-only run)."""
    from longcall.sim.hostworld import run_host
    from longcall.sim.webhooks import run_webhooks
    from longcall.sim.world import run_one

    runner = run_host if world == "host" else run_webhooks if webhooks else run_one
    result = runner(seed, trace=True, profile=profile)
    assert result.trace is not None
    for line in result.trace:
        print(line)
    for violation in result.violations:
        print(f"VIOLATION {violation}")
    print(f"verdict: {'FAIL' if result.violations else 'ok'}")
    return 1 if result.violations else 0
