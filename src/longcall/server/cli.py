"""``longcall serve``: run the reference server (SPEC O1). Imported lazily by ``longcall.cli``.

Owns: turning command-line options into a served reference server. Must not: import
``longcall.cli`` (layering) or hold protocol logic.
"""

from __future__ import annotations

import asyncio
import logging
import sys
from collections.abc import Iterable
from urllib.parse import urlsplit, urlunsplit

from longcall.errors import LongcallError
from longcall.runtime.metrics import http_url
from longcall.server.app import MCP_PATH, listening_socket
from longcall.server.examples import build_reference_server
from longcall.server.options import (
    DEFAULT_LEASE_S,
    DEFAULT_MAX_OPEN_TASKS_PER_PRINCIPAL,
    ServerOptions,
)
from longcall.server.store import DEFAULT_STORE_PATH


def run_reference_server(
    *,
    store_url: str | None,
    host: str,
    port: int,
    drop_create_response_at: int | None = None,
    lease_s: float = DEFAULT_LEASE_S,
    allowed_origins: Iterable[str] = (),
    allowed_hosts: Iterable[str] = (),
    stateful: bool = False,
    metrics_port: int | None = None,
    metrics_host: str = "127.0.0.1",
    max_open_tasks: int = DEFAULT_MAX_OPEN_TASKS_PER_PRINCIPAL,
) -> None:
    """Serve the reference tools at ``http://HOST:PORT/mcp`` until interrupted; with
    ``metrics_port`` (0: a free one) Prometheus text too, announced on stderr.
    ``max_open_tasks``: the tasks one caller may hold open at once (more are refused
    with 429 until some end)."""
    logging.basicConfig(
        level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    options = ServerOptions(
        drop_create_response_at=drop_create_response_at,
        lease_s=lease_s,
        allowed_origins=frozenset(allowed_origins),
        allowed_hosts=frozenset(host.lower() for host in allowed_hosts),
        stateful=stateful,
        max_open_tasks_per_principal=max_open_tasks,
    )
    server = build_reference_server(store=store_url, options=options)
    # Bound before the announcement, so that it names the port (0 picks a free one).
    sock = listening_socket(host, port)
    print(
        f"longcall: serving MCP at {http_url(host, sock.getsockname()[1], MCP_PATH)}"
        f" (task store {server.store.store_id}: {_without_password(store_url)})",
        flush=True,
    )
    try:
        if metrics_port is not None:
            server.metrics.serve(metrics_port, host=metrics_host)
            print(
                f"longcall: metrics at {server.metrics.url}",
                file=sys.stderr,
                flush=True,
            )
        asyncio.run(server.serve(sock=sock))
    finally:
        sock.close()
        server.metrics.close()


def _without_password(url: str | None) -> str:
    """The store URL for a log line: a password never appears (credentials stay out of logs)."""
    if url is None:
        return DEFAULT_STORE_PATH
    parts = urlsplit(url)
    if parts.password is None:
        return url
    netloc = parts.netloc.replace(f":{parts.password}@", ":***@")
    return urlunsplit(parts._replace(netloc=netloc))


def start_failure(exc: Exception, host: str, port: int) -> str:
    """The one line a failed start prints, for ``longcall serve`` and ``python -m
    longcall.server`` alike: the store's or the metrics port's own words (a
    LongcallError says what it is), else why ``host:port`` could not be listened on."""
    if isinstance(exc, LongcallError):
        return str(exc)
    reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
    return f"cannot serve on {host}:{port}: {reason}"
