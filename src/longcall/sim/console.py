"""What ``longcall sim`` prints: a progress bar, the gate table, JSON, a replay trace.

This module owns the presentation of :mod:`longcall.sim.report` results (``rich``
tables and progress, or one JSON object) and the exit status (0 only when every gate
holds). It decides nothing about the gates themselves and never imports
``longcall.cli``.
"""

from __future__ import annotations

import json

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TimeElapsedColumn
from rich.table import Table

from longcall.sim.config import DEFAULT, Profile
from longcall.sim.report import Gate, Report, run
from longcall.sim.world import FAULT_CLASSES, run_one


def run_sim(
    permutations: int,
    *,
    seed: int,
    as_json: bool,
    profile: Profile = DEFAULT,
    console: Console | None = None,
) -> int:
    """Run the permutations, print the report; the exit status says whether all gates hold."""
    console = console or Console(stderr=as_json)
    if as_json:
        report = run(permutations, seed=seed, profile=profile)
        print(json.dumps(report.as_json(), sort_keys=True))
        return 0 if report.ok else 1
    with Progress(
        "[progress.description]{task.description}",
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=console,
        transient=False,
    ) as progress:
        task = progress.add_task("permutations", total=permutations)
        report = run(
            permutations,
            seed=seed,
            profile=profile,
            on_progress=lambda n: progress.advance(task, n),
        )
    console.print(gate_table(report.gate_list(), f"release gates (profile {report.profile})"))
    console.print(gate_table(report.structural(), "structural guarantees (schema)"))
    console.print(fault_table(report))
    console.print(workers_table(report))
    for failure in report.failures:
        console.print(f"[red]FAIL[/] seed {failure['seed']}: {failure['replay']}")
        for line in failure["violations"]:
            console.print(f"    {line}")
    verdict = "[green]every gate holds[/]" if report.ok else "[red]a gate failed[/]"
    console.print(
        f"{report.permutations} permutations (seed {report.seed}) in {report.elapsed_s:.1f} s "
        f"= {report.permutations_per_s:.0f}/s, {report.virtual_hours:.0f} h of virtual time: "
        + verdict
    )
    return 0 if report.ok else 1


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


def run_mutants(
    names: list[str], *, seed: int, profile: Profile = DEFAULT, console: Console | None = None
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
        console.print(f"[red]{len(survivors)} mutants survived:[/] {', '.join(survivors)}")
        return 1
    console.print(f"[green]every mutant is caught[/] ({len(catches)} mutants)")
    return 0


def replay(seed: int, *, profile: Profile = DEFAULT) -> int:
    """Rerun one permutation and print its event trace, one line per event."""
    result = run_one(seed, trace=True, profile=profile)
    assert result.trace is not None
    for line in result.trace:
        print(line)
    for violation in result.violations:
        print(f"VIOLATION {violation}")
    print(f"verdict: {'FAIL' if result.violations else 'ok'}")
    return 1 if result.violations else 0
