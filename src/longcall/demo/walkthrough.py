"""``longcall demo --walkthrough``: three operations through the real core and a real
SQLite ledger, offline.

It plays the scripted scenarios of :mod:`longcall.walkthrough` (a completion through
an input round, a cancel that wins, a create whose response is lost and then found by
its submission key) and prints each operation's timeline and the receipts.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

from rich.console import Console
from rich.table import Table

from longcall import walkthrough
from longcall.ledger import Ledger, SQLiteLedger, open_ledger


def run_walkthrough(ledger_url: str | None = None, console: Console | None = None) -> int:
    console = console or Console()
    with tempfile.TemporaryDirectory(prefix="longcall-demo-") as tmp:
        ledger = open_ledger(ledger_url) if ledger_url else SQLiteLedger(Path(tmp) / "demo.db")
        with ledger:
            console.print(f"[bold]longcall demo[/] — ledger: {_where(ledger, ledger_url)}\n")
            for index, scenario in enumerate(walkthrough.SCENARIOS, start=1):
                node = f"demo-{index}-{scenario.name}"
                if ledger.find(node) is None:
                    walkthrough.start(ledger, node, scenario, now=0.0)
                walkthrough.drive(ledger, node, scenario, now=0.0)
                console.print(_timeline(ledger, node, scenario))
            console.print(_receipts(ledger))
            pending = ledger.outbox_pending()
            console.print(
                f"{len(pending)} ready-outbox rows, each pointing at its receipt "
                f"({', '.join(f'#{row.receipt_id}' for row in pending)})."
            )
    return 0


def _where(ledger: Ledger, url: str | None) -> str:
    return url or f"{getattr(ledger, 'path', '?')} (temporary SQLite file, WAL)"


def _timeline(ledger: Ledger, node: str, scenario: walkthrough.Scenario) -> Table:
    table = Table(title=f"{node}: {scenario.tool}({scenario.arguments})", title_justify="left")
    for column in ("v", "t (s)", "event", "state"):
        table.add_column(column)
    for row in ledger.history(node):
        table.add_row(str(row.version), f"{row.at:.1f}", row.event, row.state.value)
    return table


def _receipts(ledger: Ledger) -> Table:
    table = Table(title="terminal receipts", title_justify="left")
    for column in ("call node", "status", "kind", "operation", "epoch", "cancel gen", "digest"):
        table.add_column(column)
    for receipt in ledger.receipts():
        table.add_row(
            receipt.call_node_id,
            receipt.terminal_status.value,
            receipt.result_kind.value,
            receipt.operation_id or "-",
            str(receipt.execution_epoch),
            str(receipt.cancel_generation),
            receipt.result_digest[:19] + "…",
        )
    return table
