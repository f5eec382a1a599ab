"""``longcall serve``: run the reference server (SPEC O1). Imported lazily by ``longcall.cli``.

Owns: turning command-line options into a served reference server. Must not: import
``longcall.cli`` (layering) or hold protocol logic.
"""

from __future__ import annotations

import asyncio
import logging

from longcall.server.examples import build_reference_server
from longcall.server.options import ServerOptions


def run_reference_server(
    *, store_url: str | None, host: str, port: int, drop_create_response_at: int | None = None
) -> None:
    """Serve the reference tools at ``http://HOST:PORT/mcp`` until interrupted."""
    logging.basicConfig(
        level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    options = ServerOptions(drop_create_response_at=drop_create_response_at)
    server = build_reference_server(store=store_url, options=options)
    print(
        f"longcall: serving MCP at http://{host}:{port}/mcp"
        f" (store {store_url or 'longcall-tasks.db'})",
        flush=True,
    )
    asyncio.run(server.serve(host=host, port=port))
