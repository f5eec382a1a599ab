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

from longcall.sim.report import Report, run
from longcall.sim.world import FAULT_CLASSES, run_one


def run_sim(permutations: int, *, seed: int, as_json: bool, console: Console | None = None) -> int:
    """Run the permutations, print the report; the exit status says whether all gates hold."""
    console = console or Console(stderr=as_json)
    if as_json:
        report = run(permutations, seed=seed)
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
        report = run(permutations, seed=seed, on_progress=lambda n: progress.advance(task, n))
    console.print(gate_table(report))
    console.print(fault_table(report))
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


def gate_table(report: Report) -> Table:
    table = Table(title="release gates (SPEC F3)", title_justify="left")
    for column in ("gate", "value", "holds"):
        table.add_column(column)
    values = {
        "terminal_divergence = 0": str(report.terminal_divergence),
        "duplicate_operations = 0": str(report.duplicate_operations),
        "receipts_per_node_max <= 1": str(report.receipts_per_node_max),
        "poll interval respected": f"{report.poll_interval_violations} violations",
        "traceability = 100%": f"{report.traceability:.2%} of {report.outbox_rows} rows",
        "every safety/liveness check": f"{report.failed_permutations} failed permutations",
    }
    for name, ok in report.gates().items():
        if name.startswith("poll_qps_max"):
            value = (
                f"{report.poll_qps_max:g} / s per executor "
                f"({report.poll_qps_max_all_executors:g} / s with racing executors together)"
            )
        elif name.startswith("cancel_ack_p99_s"):
            value = (
                f"{report.cancel_ack_p99_s:.1f} s over {report.cancels} cancels "
                f"({report.cancel_ack_p99_s_without_operator:.1f} s without the "
                f"{report.cancels_operator_resolved} an operator settled)"
            )
        elif name.startswith("unknown_reconcile_max_s"):
            value = f"{report.unknown_reconcile_max_s:.1f} s over {report.unknowns} unknowns"
        else:
            value = values.get(name, "")
        table.add_row(name, value, "[green]yes[/]" if ok else "[red]NO[/]")
    return table


def fault_table(report: Report) -> Table:
    table = Table(title="faults injected (SPEC F1)", title_justify="left")
    table.add_column("fault class")
    table.add_column("count", justify="right")
    for name in FAULT_CLASSES:
        table.add_row(name, str(report.fault_counts.get(name, 0)))
    table.add_row("operator resolutions", str(report.operator_resolutions))
    return table


def replay(seed: int) -> int:
    """Rerun one permutation and print its event trace, one line per event."""
    result = run_one(seed, trace=True)
    assert result.trace is not None
    for line in result.trace:
        print(line)
    for violation in result.violations:
        print(f"VIOLATION {violation}")
    print(f"verdict: {'FAIL' if result.violations else 'ok'}")
    return 1 if result.violations else 0
