"""``longcall gateway``: long tools made safe for every MCP host (G1, O4).

Owns: turning command-line options into a served :class:`~longcall.gateway.Gateway`
(Streamable HTTP at ``http://HOST:PORT/mcp``, or stdio), its announcement line, and
``--host-config``, which prints a host entry instead of serving. Must not: hold gateway
logic (``longcall.gateway`` does).
"""

from __future__ import annotations

import asyncio
import ipaddress
import logging
import os
import shutil
import sys
import urllib.parse
from collections.abc import Callable
from pathlib import Path
from typing import Any

import click

from longcall.cli.common import (
    LONGEST_LEASE_S,
    STOPPED_KEY,
    FiniteFloatRange,
    ledger_option,
    metrics_options,
    servers_from,
    servers_option,
)
from longcall.cli.serve import Handover, stopped_line
from longcall.errors import LongcallError, MetricsPortUnavailable
from longcall.gateway.hostcalls import GatewayOptions
from longcall.gateway.pages import CHARS_PER_TOKEN

HOST_CALLS_CARRIED_ON = Handover(
    noun="host call in flight",
    none="no host call was in flight",
    fate="in its task store and ledger, for the next gateway on them (or one sharing them)"
    " to carry on; the upstream calls go on meanwhile",
)

HOST_CHOICES = ("claude-desktop", "cursor", "vscode")
LONGEST_WINDOW_S = 3_600.0
LONGEST_REPEAT_S = 86_400.0


def _repeat_option(
    flag: str, default: float, help_text: str
) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """A window of the same-call rule, in seconds of the gateway's uptime."""
    return click.option(
        flag,
        flag.removeprefix("--").replace("-", "_") + "_s",
        default=default,
        show_default=True,
        type=FiniteFloatRange(min=0, min_open=True, max=LONGEST_REPEAT_S),
        metavar="SECONDS",
        help=help_text + " The gateway's own downtime does not count.",
    )


@click.command()
@servers_option
@ledger_option
@click.option(
    "--task-store",
    "task_store",
    default=None,
    metavar="URL",
    help="Where task-aware hosts' tasks are kept: sqlite:///PATH or postgresql://…, shared"
    " by every gateway process (default: gateway-tasks.db in your data directory).",
)
@click.option("--host", default="127.0.0.1", show_default=True, help="Interface to bind.")
@click.option(
    "--port", default=8766, show_default=True, type=click.IntRange(0, 65535), help="Port to bind."
)
@click.option("--stdio", is_flag=True, help="Serve MCP on stdin/stdout (how hosts start it).")
@click.option(
    "--early-return",
    "early_return_s",
    default=40.0,
    show_default=True,
    type=FiniteFloatRange(min=0, min_open=True, max=LONGEST_WINDOW_S),
    metavar="SECONDS",
    help="A host that speaks no tasks gets the real result if the upstream finishes within"
    " this, else a handle; keep it below the host's own timeout.",
)
@_repeat_option(
    "--repeat-grace",
    GatewayOptions().repeat_grace_s,
    "A same call this soon after its outcome was given to a host is its retry and gets"
    " that outcome; later, it runs the tool again. Keep it above the hosts' timeout plus a"
    " retry.",
)
@_repeat_option(
    "--repeat-window",
    GatewayOptions().repeat_window_s,
    "A same call this soon after the call ended, its outcome never given to a host, gets"
    " that outcome.",
)
@click.option(
    "--page-tokens",
    default=8_000,
    show_default=True,
    type=click.IntRange(min=100),
    help="About this many tokens of a result per page.",
)
@click.option(
    "--token-env",
    default=None,
    metavar="NAME",
    help="Require `Authorization: Bearer <token>` over HTTP, the token read from this"
    " environment variable (default: any bearer token is its own caller).",
)
@click.option(
    "--lease-seconds",
    default=15.0,
    show_default=True,
    type=FiniteFloatRange(min=0.5, max=LONGEST_LEASE_S),
    help="How long another gateway process on the same ledger waits before taking over"
    " the calls of one that stopped.",
)
@click.option(
    "--host-config",
    type=click.Choice(HOST_CHOICES),
    default=None,
    help="Print a ready-to-paste entry for this host and exit.",
)
@metrics_options
def gateway(
    servers_path: Path | None,
    ledger_url: str | None,
    task_store: str | None,
    host: str,
    port: int,
    stdio: bool,
    early_return_s: float,
    repeat_grace_s: float,
    repeat_window_s: float,
    page_tokens: int,
    token_env: str | None,
    lease_seconds: float,
    host_config: str | None,
    metrics_port: int | None,
    metrics_host: str,
) -> None:
    """Serve the tools of the servers file's upstreams to MCP hosts, durably: Streamable
    HTTP at http://HOST:PORT/mcp, or --stdio.

    Every host call is an operation in the gateway's ledger: a restart loses nothing.
    Hosts that speak tasks get tasks; others get the result within --early-return
    seconds, or a handle and the tools longcall_status, longcall_result,
    longcall_cancel and longcall_answer.

    \b
    Examples:
      longcall gateway --servers servers.toml --port 8766
      longcall gateway --servers servers.toml --stdio
      longcall gateway --servers servers.toml --host-config claude-desktop
    """
    if host_config is not None:
        _print_host_config(host_config, servers_path, ledger_url, stdio, host, port, token_env)
        return
    _refuse_open_network_without_token(host, stdio, token_env)
    servers = servers_from(servers_path)
    if not servers.servers:
        raise click.UsageError("no upstream servers: give --servers FILE (TOML or mcpServers JSON)")
    token = None
    if token_env is not None:
        token = os.environ.get(token_env)
        if not token:
            raise click.UsageError(f"--token-env {token_env}: that variable is not set")
    logging.basicConfig(
        level=logging.WARNING if stdio else logging.INFO,
        stream=sys.stderr,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    try:
        asyncio.run(
            _serve(
                servers_path=servers_path,
                ledger_url=ledger_url,
                task_store=task_store,
                host=host,
                port=port,
                stdio=stdio,
                options=GatewayOptions(
                    early_return_s=early_return_s,
                    page_chars=page_tokens * CHARS_PER_TOKEN,
                    repeat_grace_s=repeat_grace_s,
                    repeat_window_s=repeat_window_s,
                ),
                token=token,
                lease_s=lease_seconds,
                metrics_port=metrics_port,
                metrics_host=metrics_host,
            )
        )
    except (MetricsPortUnavailable, OSError) as exc:
        if isinstance(exc, LongcallError):
            raise click.ClickException(str(exc)) from None
        reason = exc.strerror or str(exc)
        raise click.ClickException(f"cannot serve on {host}:{port}: {reason}") from None


def _is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _refuse_open_network_without_token(host: str, stdio: bool, token_env: str | None) -> None:
    """Off loopback, callers without a token would all be one anonymous caller."""
    if stdio or token_env is not None or _is_loopback(host):
        return
    raise click.UsageError(
        f"--host {host} without --token-env: every caller would share one principal and"
        " see each other's handles and results; give --token-env NAME (the variable"
        " holding the bearer token callers must send), or bind to 127.0.0.1"
    )


async def _serve(
    *,
    servers_path: Path | None,
    ledger_url: str | None,
    task_store: str | None,
    host: str,
    port: int,
    stdio: bool,
    options: GatewayOptions,
    token: str | None,
    lease_s: float,
    metrics_port: int | None,
    metrics_host: str,
) -> None:
    # The gateway (the server library, the executor) loads only when it starts.
    from longcall.client import default_ledger_path
    from longcall.gateway import Gateway, serve_stdio
    from longcall.runtime.listen import listening_socket
    from longcall.runtime.metrics import http_url
    from longcall.server import StaticTokens, token_principal
    from longcall.server.app import MCP_PATH

    if task_store is None:
        default_ledger_path().parent.mkdir(parents=True, exist_ok=True)
        task_store = str(default_ledger_path().parent / "gateway-tasks.db")
    authenticator = token_principal if token is None else StaticTokens({token: "gateway-token"})
    gateway = Gateway(
        servers=servers_from(servers_path),
        ledger=ledger_url,
        task_store=task_store,
        options=options,
        authenticator=authenticator,
        lease_s=lease_s,
    )
    sock = None if stdio else listening_socket(host, port)
    async with gateway:
        served = len(gateway.tools)
        where = "stdio" if sock is None else http_url(host, sock.getsockname()[1], MCP_PATH)
        print(
            f"longcall: gateway serving {served} upstream tools at {where}"
            f" (early return after {options.early_return_s:g} s)",
            file=sys.stderr if stdio else sys.stdout,
            flush=True,
        )
        if metrics_port is not None:
            gateway.metrics.serve(metrics_port, host=metrics_host)
            print(f"longcall: metrics at {gateway.metrics.url}", file=sys.stderr, flush=True)
        if sock is None:
            await serve_stdio(gateway.server)
        else:
            click.get_current_context().meta[STOPPED_KEY] = lambda: stopped_line(
                f"stopped the gateway at {where}",
                gateway.server.manager.handed_back,
                lease_s,
                HOST_CALLS_CARRIED_ON,
            )
            await gateway.server.serve(sock=sock)


def _print_host_config(
    host_name: str,
    servers_path: Path | None,
    ledger_url: str | None,
    stdio: bool,
    host: str,
    port: int,
    token_env: str | None,
) -> None:
    from longcall.gateway.hostconfig import host_entry, render
    from longcall.runtime.metrics import http_url
    from longcall.server.app import MCP_PATH

    command = shutil.which("longcall") or "longcall"
    arguments = ["gateway", "--stdio"]
    if servers_path is not None:
        arguments += ["--servers", str(servers_path.resolve())]
    if ledger_url is not None:
        if urllib.parse.urlsplit(ledger_url).password is not None:
            raise click.UsageError(
                "--ledger: the URL holds a password, which the host entry would print and"
                " store in the host's settings; give a URL without the password and keep it"
                " in a password file (PGPASSFILE, ~/.pgpass)"
            )
        arguments += ["--ledger", ledger_url]
    # Claude Desktop starts local servers only; the others may reach a running gateway.
    url = None
    if (
        not stdio
        and host_name != "claude-desktop"
        and click.get_current_context().get_parameter_source("port")
        is not click.core.ParameterSource.DEFAULT
    ):
        url = http_url(host, port, MCP_PATH)
    document = host_entry(
        host_name, command=command, arguments=arguments, url=url, token_env=token_env
    )
    click.echo(render(host_name, document), nl=False)
