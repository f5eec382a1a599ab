"""``longcall serve``: run the reference server (SPEC O1, S1).

Owns: turning command-line options into a served reference server, and the one line a
failed start prints. Must not: hold protocol logic (the server library does).
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import sys
from collections.abc import Iterable
from typing import TYPE_CHECKING
from urllib.parse import urlsplit, urlunsplit

import click

from longcall.cli.common import (
    LONGEST_LEASE_S,
    STOPPED_KEY,
    FiniteFloatRange,
    metrics_options,
)
from longcall.errors import LongcallError, MetricsPortUnavailable

if TYPE_CHECKING:
    from longcall.server.webhooks.model import WebhookOptions


@click.command()
@click.option(
    "--store",
    "store_url",
    default=None,
    help="Task store URL (sqlite:///PATH, or postgresql://... shared by several servers;"
    " default: longcall-tasks.db in the working directory).",
)
@click.option("--host", default="127.0.0.1", show_default=True, help="Interface to bind.")
@click.option(
    "--port", default=8765, show_default=True, type=click.IntRange(0, 65535), help="Port to bind."
)
@click.option(
    "--lease-seconds",
    default=15.0,
    show_default=True,
    type=FiniteFloatRange(min=0.5, max=LONGEST_LEASE_S),
    help="How long another server on the same store waits before taking over a task"
    " whose server stopped, when it cannot tell that server's process is gone (the"
    " tasks of a process known dead are taken over at once).",
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
@click.option(
    "--max-open-tasks",
    default=1000,  # the server's own default, written here so the CLI starts without it
    show_default=True,
    type=click.IntRange(min=1),
    help="Tasks one caller may hold open at once; past it a new task is refused (429)"
    " until some end.",
)
@click.option(
    "--webhooks",
    is_flag=True,
    help="Serve the webhook API (/webhooks/endpoints, /webhooks/deliveries, replay) and"
    " send each registered endpoint its principal's task status changes, signed.",
)
@click.option(
    "--webhook-allow-loopback",
    is_flag=True,
    help="Also deliver to loopback addresses (development and tests; implies --webhooks).",
)
@click.option(
    "--webhook-allow-private",
    is_flag=True,
    help="Also deliver to private addresses (RFC 1918, ULA, shared; implies --webhooks)."
    " Link-local (cloud metadata) addresses stay refused.",
)
@click.option(
    "--webhook-allow-network",
    "webhook_networks",
    multiple=True,
    metavar="CIDR",
    help="Also deliver to addresses in this network (repeat; implies --webhooks).",
)
@click.option(
    "--webhook-timeout",
    "webhook_timeout_s",
    default=15.0,
    show_default=True,
    type=FiniteFloatRange(min=0.1, max=300),
    help="Seconds one delivery attempt may take (connect, send, read the answer's head).",
)
@click.option(
    "--webhook-retry-base",
    "webhook_retry_base_s",
    default=5.0,
    show_default=True,
    type=FiniteFloatRange(min=0.01, max=3600),
    help="The first retry's ceiling in seconds; doubled per attempt (full jitter).",
)
@click.option(
    "--webhook-retry-max",
    "webhook_retry_max_s",
    default=3600.0,
    show_default=True,
    type=FiniteFloatRange(min=0.01, max=86400),
    help="The longest wait between two attempts of one delivery, in seconds.",
)
@metrics_options
def serve(
    store_url: str | None,
    host: str,
    port: int,
    lease_seconds: float,
    allowed_origin: tuple[str, ...],
    allowed_host: tuple[str, ...],
    stateful: bool,
    max_open_tasks: int,
    webhooks: bool,
    webhook_allow_loopback: bool,
    webhook_allow_private: bool,
    webhook_networks: tuple[str, ...],
    webhook_timeout_s: float,
    webhook_retry_base_s: float,
    webhook_retry_max_s: float,
    metrics_port: int | None,
    metrics_host: str,
) -> None:
    """Serve the reference long-running tools: MCP at http://HOST:PORT/mcp, AIP-151 at
    /v1, Apify-style at /apify/mcp.

    \b
    Examples:
      longcall serve --port 8765
      longcall serve --store sqlite:///tasks.db --host 0.0.0.0 --allowed-host tools.example
      longcall serve --metrics-port 9464
      longcall serve --webhooks --webhook-allow-loopback   # webhooks to a local receiver
    """
    webhook_options = None
    if webhooks or webhook_allow_loopback or webhook_allow_private or webhook_networks:
        webhook_options = _webhook_options(
            allow_loopback=webhook_allow_loopback,
            allow_private=webhook_allow_private,
            networks=webhook_networks,
            timeout_s=webhook_timeout_s,
            retry_base_s=webhook_retry_base_s,
            retry_max_s=webhook_retry_max_s,
        )
    try:
        run_reference_server(
            store_url=store_url,
            host=host,
            port=port,
            lease_s=lease_seconds,
            allowed_origins=allowed_origin,
            allowed_hosts=allowed_host,
            stateful=stateful,
            metrics_port=metrics_port,
            metrics_host=metrics_host,
            max_open_tasks=max_open_tasks,
            webhooks=webhook_options,
        )
    except (MetricsPortUnavailable, OSError) as exc:
        raise click.ClickException(start_failure(exc, host, port)) from None


def run_reference_server(
    *,
    store_url: str | None,
    host: str,
    port: int,
    lease_s: float,
    allowed_origins: Iterable[str],
    allowed_hosts: Iterable[str],
    stateful: bool,
    metrics_port: int | None,
    metrics_host: str,
    max_open_tasks: int,
    webhooks: WebhookOptions | None = None,
) -> None:
    """Serve the reference tools at ``http://HOST:PORT/mcp`` until interrupted; with
    ``metrics_port`` (0: a free one) Prometheus text too, announced on stderr.
    ``max_open_tasks``: the tasks one caller may hold open at once (more are refused
    with 429 until some end)."""
    # The server library loads when a server starts, never for ``longcall --help``.
    from longcall.runtime.listen import listening_socket
    from longcall.runtime.metrics import http_url
    from longcall.server.app import MCP_PATH
    from longcall.server.examples import build_reference_server
    from longcall.server.options import ServerOptions

    logging.basicConfig(
        level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    options = ServerOptions(
        lease_s=lease_s,
        allowed_origins=frozenset(allowed_origins),
        allowed_hosts=frozenset(host.lower() for host in allowed_hosts),
        stateful=stateful,
        max_open_tasks_per_principal=max_open_tasks,
    )
    server = build_reference_server(store=store_url, options=options, webhooks=webhooks)
    # Bound before the announcement, so that it names the port (0 picks a free one).
    sock = listening_socket(host, port)
    url = http_url(host, sock.getsockname()[1], MCP_PATH)
    print(
        f"longcall: serving MCP at {url}"
        f" (task store {server.store.store_id}: {_without_password(store_url)})",
        flush=True,
    )
    click.get_current_context().meta[STOPPED_KEY] = lambda: stopped_line(
        f"stopped serving {url}", server.manager.handed_back, lease_s
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


def _webhook_options(
    *,
    allow_loopback: bool,
    allow_private: bool,
    networks: tuple[str, ...],
    timeout_s: float,
    retry_base_s: float,
    retry_max_s: float,
) -> WebhookOptions:
    from longcall.server.webhooks.model import AddressPolicy, RetryPolicy, WebhookOptions

    try:
        addresses = AddressPolicy.from_text(
            allow_loopback=allow_loopback, allow_private=allow_private, networks=networks
        )
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--webhook-allow-network") from None
    return WebhookOptions(
        addresses=addresses,
        attempt_timeout_s=timeout_s,
        retry=RetryPolicy(base_delay_s=retry_base_s, max_delay_s=max(retry_base_s, retry_max_s)),
    )


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class Handover:
    """What a task server's stop says of the tasks it hands back to its store."""

    noun: str
    """One of them, counted: "running task"."""
    none: str
    """When there were none."""
    fate: str
    """Where they stay and what becomes of them."""


TASKS_TAKEN_OVER = Handover(
    noun="running task",
    none="no task was running",
    fate="in the task store, for the next server on it (or one sharing it) to take over:"
    " an idempotent tool runs again, any other ends failed",
)


def stopped_line(
    stopped: str, handed_back: int | None, lease_s: float, handover: Handover = TASKS_TAKEN_OVER
) -> str:
    """What Ctrl-C on a task server says: what stopped, and what became of the tasks it
    was running (``handed_back``: the leases its stop gave back; None: it stopped at
    once, on a second Ctrl-C, or could not reach its store to give them back)."""
    if handed_back is None:
        return (
            f"{stopped} at once; each {handover.noun} stays {handover.fate}, once its lease"
            f" lapses (within {lease_s:g} s)"
        )
    if handed_back == 0:
        return f"{stopped}; {handover.none}"
    counted = (
        f"its {handover.noun} stays"
        if handed_back == 1
        else f"its {handed_back} {handover.noun}s stay"
    )
    return f"{stopped}; {counted} {handover.fate}"


def _without_password(url: str | None) -> str:
    """The store URL for a log line: a password never appears (credentials stay out of logs)."""
    if url is None:
        from longcall.server.store import DEFAULT_STORE_PATH

        return DEFAULT_STORE_PATH
    parts = urlsplit(url)
    if parts.password is None:
        return url
    netloc = parts.netloc.replace(f":{parts.password}@", ":***@")
    return urlunsplit(parts._replace(netloc=netloc))


def start_failure(exc: Exception, host: str, port: int) -> str:
    """The one line a failed start prints: the store's or the metrics port's own words (a
    LongcallError says what it is), else why ``host:port`` could not be listened on."""
    if isinstance(exc, LongcallError):
        return str(exc)
    reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
    return f"cannot serve on {host}:{port}: {reason}"
