"""A server process for the restart test: idempotent and non-idempotent tools that run or wait.

Run as ``python tests/server/restart_server.py --store PATH --port PORT``; the test kills it
with SIGKILL and starts it again on the same store.
"""

from __future__ import annotations

import argparse
import asyncio
import os
from typing import Any

from longcall.server import LongcallServer, ServerOptions, TaskContext

LEASE_S = 1.0
FORM = {"type": "object", "properties": {"ok": {"type": "boolean"}}, "required": ["ok"]}


def build(store: str) -> LongcallServer:
    """The restart-test server: ``hold``/``ask`` are idempotent, ``once``/``ask_once`` are not."""
    # A short lease: after the SIGKILL, the restarted process takes the dead one's
    # tasks over as soon as their leases expire.
    server = LongcallServer(store=store, options=ServerOptions(lease_s=LEASE_S))

    @server.tool(task="required", idempotent=True)
    async def hold(seconds: float) -> dict[str, Any]:
        await asyncio.sleep(seconds)
        return {"held": seconds, "pid": os.getpid()}

    @server.tool(task="required", idempotent=False)
    async def once(seconds: float) -> dict[str, Any]:
        await asyncio.sleep(seconds)
        return {"ran": seconds}

    @server.tool(task="required", idempotent=True)
    async def ask(ctx: TaskContext) -> dict[str, Any]:
        return await ctx.elicit("ok?", FORM)

    @server.tool(task="required", idempotent=False)
    async def ask_once(ctx: TaskContext) -> dict[str, Any]:
        return await ctx.elicit("ok?", FORM)

    return server


def main() -> None:
    """Serve until killed."""
    parser = argparse.ArgumentParser()
    parser.add_argument("--store", required=True)
    parser.add_argument("--port", type=int, required=True)
    args = parser.parse_args()
    asyncio.run(build(args.store).serve(host="127.0.0.1", port=args.port))


if __name__ == "__main__":
    main()
