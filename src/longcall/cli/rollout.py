"""``longcall rollout``: read and change the ledger's rollout plan (SPEC R1-R3, P6, O1).

Owns: the ``status``, ``set``, ``canary``, ``shadow``, ``shadow-report`` and
``rollback`` subcommands. The plan lives in the ledger, so every worker of that ledger
routes new calls by it; :mod:`longcall.runtime.rollout` holds the rules. Must not:
route, rebind or compare anything itself.
"""

from __future__ import annotations

import contextlib
import json
import random
import time
from collections.abc import Iterator
from typing import Any

import click
from rich.console import Console
from rich.table import Table

from longcall.cli.common import (
    ExitCode,
    FiniteFloatRange,
    client_for,
    fail,
    json_option,
    ledger_option,
)
from longcall.core.keys import first_unprintable
from longcall.errors import LedgerMissing, LongcallError
from longcall.ledger import ADAPTER_STATES, AdapterPlan, Ledger


@click.group()
def rollout() -> None:
    """Roll a protocol adapter version out and back (stored in the ledger).

    \b
    Examples:
      longcall rollout status
      longcall rollout canary 2026-07-28 2 10 --for-other-builds --note "new mapping on a tenth"
      longcall rollout rollback 2026-07-28 --from 2 --to 1 --note "divergent results"
    """


def _a_name(ctx: click.Context, param: click.Parameter, value: str) -> str:
    """A protocol or version word as workers are told it (``--runs P=V``): not empty,
    no spaces, no ``=``, nothing a terminal would obey."""
    if not value or first_unprintable(value) or any(ch.isspace() or ch == "=" for ch in value):
        raise click.BadParameter(f"{value!r} is not a protocol or version name", ctx, param)
    return value


@contextlib.contextmanager
def _ledger(url: str | None, *, create: bool = False) -> Iterator[Ledger]:
    """The ledger whose plan is read or changed, found as every command finds it (the
    client's rule: --ledger, $LONGCALL_LEDGER, the data-directory file). Reading never
    makes one; a plan may be set before the first worker starts, so a change does, as
    a first call does (with the data directory, for the default file)."""
    client = client_for(url, create=create)
    try:
        yield client.ledger
    finally:
        client.close()


@rollout.command("status")
@ledger_option
@json_option
def rollout_status(ledger_url: str | None, as_json: bool) -> None:
    """Show the plan, how many open operations each adapter version drives, and the
    adapter versions this build runs (before any ledger exists too: no plan is set).

    \b
    Example:
      longcall rollout status --json
    """
    try:
        plan, open_by_version = _plan_and_open_operations(ledger_url)
    except LedgerMissing as missing:
        # Nothing recorded yet: no plan either, and reading never makes a ledger.
        if as_json:
            click.echo("[]")
            return
        click.echo(f"no plan is set: {missing}; every adapter version this build runs is used")
        click.echo(_build_runs())
        return
    rows: list[dict[str, Any]] = [
        {
            "protocol": p.protocol,
            "adapter_version": p.adapter_version,
            "state": p.state,
            "canary_percent": p.canary_percent,
            "open_operations": open_by_version.pop((p.protocol, p.adapter_version), 0),
            "note": p.note,
            "updated_at_utc": p.updated_at_utc,
        }
        for p in plan
    ]
    rows += [
        {"protocol": protocol, "adapter_version": version, "state": "enabled (no plan row)",
         "canary_percent": 0.0, "open_operations": count, "note": "", "updated_at_utc": ""}
        for (protocol, version), count in sorted(open_by_version.items())
    ]  # fmt: skip
    if as_json:
        click.echo(json.dumps(rows, indent=2, sort_keys=True))
        return
    table = Table(title="rollout plan", title_justify="left")
    for column in ("protocol", "version", "state", "canary %", "open operations", "note"):
        table.add_column(column)
    for row in rows:
        table.add_row(
            row["protocol"],
            row["adapter_version"],
            row["state"],
            f"{row['canary_percent']:g}",
            str(row["open_operations"]),
            row["note"],
        )
    if rows:
        Console().print(table)
    else:
        click.echo("no plan is set: every adapter version this build runs is used")
    click.echo(_build_runs())
    if any(row["state"] == "shadow" for row in rows):
        click.echo("how the shadow calls compare: longcall rollout shadow-report")


def _plan_and_open_operations(
    ledger_url: str | None,
) -> tuple[list[AdapterPlan], dict[tuple[str, str], int]]:
    """The ledger's plan and its open operations by (protocol, adapter version);
    LedgerMissing when there is no ledger yet."""
    with _ledger(ledger_url) as ledger:
        plan = ledger.rollout_plan()
        open_by_version: dict[tuple[str, str], int] = {}
        for record in ledger.list_by_state():
            if not record.is_terminal:
                key = (record.protocol, record.adapter_version)
                open_by_version[key] = open_by_version.get(key, 0) + 1
    return list(plan), open_by_version


def _build_runs() -> str:
    """The line naming the (protocol, adapter version) pairs this build carries."""
    carried = ", ".join(f"{p} {v}" for p, v in sorted(_carried()) if not p.endswith("/sync"))
    return f"this build runs: {carried} (and plain MCP tools calls)"


def _write(ledger_url: str | None, plan: AdapterPlan, *, other_builds: bool = False) -> None:
    _refuse_if_not_carried(plan, other_builds=other_builds)
    with _ledger(ledger_url, create=True) as ledger:
        ledger.set_rollout(plan)
    click.echo(f"{plan.protocol} {plan.adapter_version}: {plan.state}")
    if plan.state not in ("draining", "disabled"):
        _note_if_not_carried(plan.protocol, plan.adapter_version)


def _carried() -> frozenset[tuple[str, str]]:
    from longcall.adapters.routing import carried_versions  # not at start-up: slow

    return carried_versions()


def _refuse_if_not_carried(plan: AdapterPlan, *, other_builds: bool) -> None:
    """A plan that would send new calls where no worker of this build goes is refused
    before it is stored, with what to do instead (``--for-other-builds`` when workers of
    another build do run that version)."""
    from longcall.runtime.rollout import uncarried_target

    why = None if other_builds else uncarried_target(plan, _carried())
    if why is not None:
        fail(
            f"refused: {why}. Roll out a version this build carries (longcall rollout"
            " status lists them), or, if workers of another build run"
            f" {plan.protocol} {plan.adapter_version}, add --for-other-builds",
            ExitCode.REFUSED,
        )


def _note_if_not_carried(protocol: str, version: str) -> None:
    """Operations bound to a version this build's adapters do not bind are driven only
    by a worker that names it: say so where the plan sends work there."""
    if (protocol, version) in _carried():
        return
    click.echo(
        f"note: this build's workers do not run {protocol} {version}; its operations wait"
        f" for a worker that does (longcall worker --runs {protocol}={version}, or"
        " --runs any to drive every version with this build's code)",
        err=True,
    )


other_builds_option = click.option(
    "--for-other-builds",
    "other_builds",
    is_flag=True,
    help="The version is run by workers of another build: set the plan although no"
    " worker of this build runs it.",
)


@rollout.command("set")
@click.argument("protocol", callback=_a_name)
@click.argument("version", callback=_a_name)
@click.argument("state", type=click.Choice(ADAPTER_STATES))
@click.option("--note", default="", help="Why (kept in the plan).")
@other_builds_option
@ledger_option
def rollout_set(
    protocol: str, version: str, state: str, note: str, other_builds: bool, ledger_url: str | None
) -> None:
    """Set VERSION of PROTOCOL to STATE (draining/disabled: no new calls, in-flight go on).

    \b
    Example:
      longcall rollout set 2025-11-25 1 draining --note "moving callers to 2026-07-28"
    """
    _write(
        ledger_url,
        AdapterPlan(protocol=protocol, adapter_version=version, state=state, note=note),
        other_builds=other_builds,
    )


@rollout.command("canary")
@click.argument("protocol", callback=_a_name)
@click.argument("version", callback=_a_name)
@click.argument("percent", type=FiniteFloatRange(0, 100))
@click.option("--note", default="", help="Why (kept in the plan).")
@other_builds_option
@ledger_option
def rollout_canary(
    protocol: str,
    version: str,
    percent: float,
    note: str,
    other_builds: bool,
    ledger_url: str | None,
) -> None:
    """Route PERCENT of new PROTOCOL calls (a stable share of call nodes) to VERSION;
    the others go to the enabled version (or, with none enabled, to this build's).

    A version no worker of this build runs is refused, unless workers of another build
    run it (--for-other-builds).

    \b
    Example:
      longcall rollout canary 2026-07-28 2 10 --for-other-builds --note "new mapping on a tenth"
    """
    plan = AdapterPlan(
        protocol=protocol,
        adapter_version=version,
        state="canary",
        canary_percent=percent,
        note=note,
    )
    _write(ledger_url, plan, other_builds=other_builds)


@rollout.command("shadow")
@click.argument("protocol", callback=_a_name)
@click.argument("version", callback=_a_name)
@click.option("--note", default="", help="Why (kept in the plan).")
@ledger_option
def rollout_shadow(protocol: str, version: str, note: str, ledger_url: str | None) -> None:
    """Make VERSION a shadow of PROTOCOL: it takes no calls of its own, and each new
    call of a tool that declares itself read-only (MCP readOnlyHint: true) is also
    made through VERSION, as a separate operation under the call node
    <node>~shadow-VERSION. A shadow's result advances nothing downstream; once both
    are done their status and result digest are compared (rollout shadow-report).
    Calls of any other tool are never shadowed.

    A shadow operation is driven by a worker that runs VERSION.

    \b
    Example:
      longcall rollout shadow 2026-07-28 2
    """
    _write(
        ledger_url,
        AdapterPlan(protocol=protocol, adapter_version=version, state="shadow", note=note),
    )
    click.echo(
        f"new calls of {protocol} tools that declare themselves read-only (readOnlyHint: true)"
        f" are also made through {version}; calls of other tools are not shadowed"
    )


@rollout.command("shadow-report")
@ledger_option
@json_option
def rollout_shadow_report(ledger_url: str | None, as_json: bool) -> None:
    """Per protocol and shadow version: how many shadow calls matched their primary,
    which differed (and in what), which are still running. Pairs that finished
    without being compared are compared now.

    \b
    Example:
      longcall rollout shadow-report --json
    """
    from longcall.runtime.rollout import shadow_report

    with _ledger(ledger_url) as ledger:
        try:
            tallies = shadow_report(ledger)
        except LongcallError as exc:
            raise click.ClickException(str(exc)) from exc
    if as_json:
        click.echo(json.dumps([t.to_json() for t in tallies], indent=2, sort_keys=True))
        return
    if not tallies:
        click.echo("no shadow calls")
        return
    table = Table(title="shadow calls", title_justify="left")
    for column in ("protocol", "version", "matched", "differed", "pending"):
        table.add_column(column)
    for tally in tallies:
        table.add_row(
            tally.protocol,
            tally.adapter_version,
            str(tally.matched),
            str(len(tally.differed)),
            str(len(tally.pending)),
        )
    Console().print(table)
    for tally in tallies:
        for comparison in tally.differed:
            click.echo(
                f"differs: {comparison.shadow_node} (primary {comparison.primary_node}):"
                f" {comparison.detail}"
            )


@rollout.command("rollback")
@click.argument("protocol", callback=_a_name)
@click.option(
    "--from", "from_version", required=True, callback=_a_name, help="The version to take out."
)
@click.option(
    "--to", "to_version", required=True, callback=_a_name, help="The version that takes over."
)
@click.option("--note", default="", help="Why (kept in the plan).")
@other_builds_option
@ledger_option
def rollout_rollback(
    protocol: str,
    from_version: str,
    to_version: str,
    note: str,
    other_builds: bool,
    ledger_url: str | None,
) -> None:
    """Stop new calls on FROM, and hand its in-flight operations to TO at a new epoch.

    \b
    Example:
      longcall rollout rollback 2026-07-28 --from 2 --to 1 --note "results differ"
    """
    from longcall.runtime.rollout import rollback

    if from_version == to_version:
        raise click.BadParameter("--from and --to name the same version", param_hint="--to")
    _refuse_if_not_carried(
        AdapterPlan(protocol=protocol, adapter_version=to_version, state="enabled"),
        other_builds=other_builds,
    )
    with _ledger(ledger_url, create=True) as ledger:
        try:
            rebound = rollback(
                ledger,
                protocol=protocol,
                from_version=from_version,
                to_version=to_version,
                now=time.time(),
                rng=random.Random(),
                note=note,
            )
        except LongcallError as exc:
            raise click.ClickException(str(exc)) from exc
    click.echo(
        f"{protocol}: {from_version} disabled, {to_version} enabled; "
        f"{len(rebound)} in-flight operations handed to {to_version}"
    )
    _note_if_not_carried(protocol, to_version)
