"""``longcall console``: the operator's web console over the ledger.

Owns the command line of the console: its options, the first stdout line (the URL
with its token), and the note on stderr when it listens beyond loopback. Must not:
hold any page or rule of the console (``longcall.console`` does).
"""

from __future__ import annotations

import asyncio
import ipaddress
import sys

import click

from longcall.cli.common import STOPPED_KEY, ledger_option


def _loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def _host_names(
    _ctx: click.Context, _param: click.Parameter, names: tuple[str, ...]
) -> tuple[str, ...]:
    for name in names:
        if not name or any(c in name for c in "/@?# ") or name.count(":") == 1:
            raise click.BadParameter(
                f"{name!r}: give a host name or address without scheme, port or path"
            )
    return names


def _beyond_loopback(host: str, origins: frozenset[str]) -> str:
    answered = ", ".join(sorted(origins))
    return (
        f"longcall: the console listens on {host}, beyond this machine: anyone who can reach"
        " it and holds the token can act on the ledger. It answers only at "
        f"{answered}; a browser using any other address gets 421 (name it with"
        " --allowed-host)"
    )


@click.command()
@ledger_option
@click.option(
    "--port",
    type=click.IntRange(0, 65535),
    default=0,
    show_default=True,
    help="Port to listen on (0: a free one).",
)
@click.option(
    "--host",
    default="127.0.0.1",
    show_default=True,
    help="Interface to listen on; beyond loopback, browsers elsewhere also need --allowed-host.",
)
@click.option(
    "--allowed-host",
    "allowed_hosts",
    multiple=True,
    callback=_host_names,
    help="A host name or address browsers use to reach it, besides loopback (repeat).",
)
def console(ledger_url: str | None, port: int, host: str, allowed_hosts: tuple[str, ...]) -> None:
    """Serve the operator's web console over the ledger: what needs a person, every
    operation and what it waits on, and the answer, cancel and reconcile actions.

    The first line printed is the address to open, with its token; anyone with that
    address can act on the ledger as you. Stop it with Ctrl-C (exit 130).

    \b
    Examples:
      longcall console
      longcall console --ledger postgresql://db.internal/longcall --port 8790
      longcall console --host 0.0.0.0 --port 8790 --allowed-host ops.internal
    """
    from longcall.client import default_ledger_url
    from longcall.console import open_console, serve

    server, sock = open_console(
        ledger_url or default_ledger_url(), host=host, port=port, allowed_hosts=allowed_hosts
    )
    click.echo(server.url)
    sys.stdout.flush()  # the first line, at once: a script waits for it through a pipe
    if not _loopback(host):
        click.echo(_beyond_loopback(host, server.origins), err=True)
    address = server.url.partition("?")[0]  # its token was printed once, above
    click.get_current_context().meta[STOPPED_KEY] = lambda: (
        f"stopped the console at {address}; the ledger is as it was"
    )
    asyncio.run(serve(server, sock))
