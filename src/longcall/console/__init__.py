"""``longcall console``: the operator's web console over the ledger every command uses.

Pages (server-rendered, with one small script for live updates): home with what needs
a person first, the operations list, one operation, the input inbox, the
reconciliation queue, servers and workers. Every action is a POST that runs the
client's own command (``longcall ops answer|cancel|reconcile``). See
``docs/design/console.md`` for the stack and the safety rules.

Must not: write the ledger except through :class:`~longcall.client.Client`'s commands,
or show a credential.
"""

from __future__ import annotations

from longcall.console.app import Console, open_console, serve, shown_ledger

__all__ = ["Console", "open_console", "serve", "shown_ledger"]
