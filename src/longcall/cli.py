"""The ``longcall`` command: one entry point for every part (SPEC O1).

Subcommands live next to the part they drive and are imported lazily, so that
``longcall --help`` stays fast and a missing optional dependency only affects its
own command.
"""

from __future__ import annotations

import click

from longcall.caller import call, ops, worker
from longcall.rollout_cli import rollout


@click.group()
@click.version_option(package_name="longcall")
def main() -> None:
    """Durable long-running tool calls: exactly one accepted terminal outcome per call."""


@main.command()
@click.option(
    "--walkthrough",
    is_flag=True,
    help="Only the offline walkthrough: three scripted operations through core + ledger.",
)
def demo(walkthrough: bool) -> None:
    """The main job end to end: reference server, executor, SQLite ledger, faults."""
    if walkthrough:
        from longcall.demo_walkthrough import run_demo as run_walkthrough

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
@click.option("--port", default=8765, show_default=True, type=int, help="Port to bind.")
@click.option(
    "--lease-seconds",
    default=15.0,
    show_default=True,
    type=click.FloatRange(min=0.5),
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
def serve(
    store_url: str | None,
    host: str,
    port: int,
    lease_seconds: float,
    allowed_origin: tuple[str, ...],
    allowed_host: tuple[str, ...],
    stateful: bool,
) -> None:
    """Serve the reference long-running MCP tools at http://HOST:PORT/mcp."""
    from longcall.server.cli import run_reference_server

    run_reference_server(
        store_url=store_url,
        host=host,
        port=port,
        lease_s=lease_seconds,
        allowed_origins=allowed_origin,
        allowed_hosts=allowed_host,
        stateful=stateful,
    )


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
def sim(
    permutations: str,
    seed: str,
    profile: str,
    as_json: bool,
    replay_seed: str | None,
    mutant_table: bool,
    mutant_names: tuple[str, ...],
) -> None:
    """Run the deterministic simulator and judge the release gates (SPEC F1-F3)."""
    from longcall.sim.config import PROFILES
    from longcall.sim.console import replay, run_mutants, run_sim

    count = _whole_number(permutations, "--permutations", minimum=1)
    run_seed = _whole_number(seed, "--seed", minimum=0)
    chosen = PROFILES.get(profile)
    if chosen is None:
        raise click.ClickException(
            f"--profile: unknown profile {profile!r}; choose one of {', '.join(PROFILES)}"
        )
    if replay_seed is not None:
        seed_of_one = _whole_number(replay_seed, "--replay", minimum=0)
        raise SystemExit(replay(seed_of_one, profile=chosen))
    if mutant_table or mutant_names:
        from longcall.sim.mutants import UnknownMutant

        try:
            code = run_mutants(list(mutant_names), seed=run_seed, profile=chosen)
        except UnknownMutant as exc:
            raise click.ClickException(f"--mutant: {exc}") from exc
        raise SystemExit(code)
    raise SystemExit(run_sim(count, seed=run_seed, as_json=as_json, profile=chosen))


def _whole_number(text: str, option: str, *, minimum: int) -> int:
    """An option's whole number, or a one-line error naming the option."""
    try:
        value = int(text)
    except ValueError:
        raise click.ClickException(f"{option}: {text!r} is not a whole number") from None
    if value < minimum:
        raise click.ClickException(f"{option}: {value} is below {minimum}")
    return value


main.add_command(call)
main.add_command(worker)
main.add_command(ops)
main.add_command(rollout)
