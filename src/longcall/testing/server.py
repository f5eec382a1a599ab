"""``python -m longcall.testing.server``: the reference server behind a fault layer.

Owns: serving the reference tools (durable task store) behind
:class:`~longcall.testing.faults.LoseCreateResponse`, which loses the create response of
the one call named by ``--lose-create TOOL ARGUMENTS_JSON``. Must not: hold tool or
protocol logic (the reference server does).
"""

from __future__ import annotations

import argparse
import asyncio
import json
from typing import Any

import uvicorn

from longcall.runtime.listen import listening_socket
from longcall.server.examples import build_reference_server
from longcall.testing.faults import LoseCreateResponse


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m longcall.testing.server")
    parser.add_argument("--store", required=True, help="task store URL (sqlite:///PATH)")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument(
        "--lose-create",
        nargs=2,
        metavar=("TOOL", "ARGUMENTS"),
        default=None,
        help="lose the create response of this call (tool and its arguments as JSON)",
    )
    args = parser.parse_args()
    server = build_reference_server(store=args.store)
    app: Any = server.asgi_app()
    if args.lose_create is not None:
        tool, arguments = args.lose_create
        app = LoseCreateResponse(app, tool=tool, arguments=json.loads(arguments))
    config = uvicorn.Config(app, log_level="warning", timeout_graceful_shutdown=2)
    with listening_socket(args.host, args.port) as sock:
        asyncio.run(uvicorn.Server(config).serve(sockets=[sock]))


if __name__ == "__main__":
    main()
