"""The ``longcall`` command: one entry point for every part (SPEC O1).

Subcommands live next to the part they drive and are imported lazily, so that
``longcall --help`` stays fast and a missing optional dependency only affects its
own command.
"""

from __future__ import annotations

import click


@click.group()
@click.version_option(package_name="longcall")
def main() -> None:
    """Durable long-running tool calls: exactly one accepted terminal outcome per call."""


@main.command()
@click.option("--ledger", "ledger_url", default=None, help="Ledger URL (default: a temp file).")
def demo(ledger_url: str | None) -> None:
    """Walk three operations through the core and the SQLite ledger."""
    from longcall.demo import run_demo

    raise SystemExit(run_demo(ledger_url))
