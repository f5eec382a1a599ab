"""``longcall tools``: what a server offers, before anything is called (SPEC O1).

A thin layer over :meth:`longcall.Client.tools`: the names a server lists, which need
tasks, and what arguments each takes. Must not: record anything (no ledger is made or
written), or decide what a tool's listing means (the adapters read it).
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path
from typing import Any

import click
from rich.markup import escape
from rich.table import Table

from longcall.cli.common import (
    client_for,
    json_option,
    out_console,
    run_async,
    servers_from,
    servers_option,
)
from longcall.errors import UnknownTool

TASK_WORDS = {"required": "required", "optional": "optional", "forbidden": "no"}


@click.command()
@click.argument("url", metavar="SERVER")
@click.argument("tool", required=False)
@click.option("--protocol", default=None, help="As for `longcall call` (default: negotiated).")
@json_option
@servers_option
def tools(
    url: str, tool: str | None, protocol: str | None, as_json: bool, servers_path: Path | None
) -> None:
    """List the tools SERVER offers (a URL, or a name from the servers file): their
    names, whether they run as tasks, and their arguments; with TOOL, its whole input
    schema. Nothing is called or recorded. An Apify-style server's tools are listed
    through MCP; an AIP-151 server's at GET /v1/tools.

    \b
    Examples:
      longcall tools http://127.0.0.1:8765/mcp
      longcall tools http://127.0.0.1:8765/mcp sleep_report
      longcall tools http://127.0.0.1:8765/apify/mcp --json
      longcall tools http://127.0.0.1:8765/v1
    """
    target = servers_from(servers_path).resolve(url)
    apify_style = is_apify_style(target.url, protocol or target.protocol)
    # An Apify-style endpoint is an MCP server: its tools are listed as any MCP
    # server's (the version negotiated), though a call to one goes through its runs.
    listing = "mcp" if apify_style else protocol

    async def main(scratch: str) -> list[dict[str, Any]]:
        # A throwaway ledger: the client needs one to drive, and nothing is recorded.
        async with client_for(
            f"sqlite:///{scratch}/ledger.db", create=True, connects=True, servers_path=servers_path
        ) as client:
            return await client.tools(url, protocol=listing)

    with tempfile.TemporaryDirectory(prefix="longcall-tools-") as scratch:
        listed = run_async(lambda: main(scratch))
    if tool is not None:
        chosen = next((t for t in listed if t.get("name") == tool), None)
        if chosen is None:
            from longcall.adapters.mcp.tools import suggestion

            raise UnknownTool(f"{url} does not list tool {tool!r}{suggestion(listed, tool)}")
        if as_json:
            click.echo(json.dumps(chosen, indent=2, sort_keys=True))
            return
        out_console().print(
            f"[bold]{escape(tool)}[/] (tasks: {TASK_WORDS.get(chosen['taskSupport'], '?')})"
            f" — {escape(str(chosen.get('description') or ''))}",
            soft_wrap=True,
        )
        click.echo(json.dumps(chosen.get("inputSchema") or {}, indent=2, sort_keys=True))
        return
    if as_json:
        click.echo(json.dumps(listed, indent=2, sort_keys=True))
        return
    table = Table(title=f"tools at {escape(url)}", title_justify="left")
    for column in ("tool", "tasks", "arguments", "description"):
        table.add_column(column, overflow="fold")
    for entry in listed:
        table.add_row(
            escape(str(entry.get("name"))),
            TASK_WORDS.get(entry["taskSupport"], "?"),
            escape(arguments_of(entry.get("inputSchema"))),
            escape(first_line(entry.get("description"))),
        )
    out_console().print(table)
    if apify_style:
        click.echo(APIFY_NOTE, err=True)


APIFY_NOTE = (
    "An Apify-style server: its tools run no MCP tasks, but each Actor tool starts a run"
    " and answers at once, and `longcall call` follows that run to its end (get-actor-run)."
)


def is_apify_style(url: str, protocol: str | None) -> bool:
    """Whether a call to ``url`` would speak Apify-style: ``protocol`` says so, or none
    is given and the URL's path does (as a call decides)."""
    from longcall.adapters.routing import ALIASES, APIFY, protocol_of_url

    if protocol:
        return ALIASES.get(protocol.lower()) == APIFY
    return protocol_of_url(url) == APIFY


def arguments_of(schema: Any) -> str:
    """``seconds: number, rows?: integer``: each argument, ``?`` when optional."""
    if not isinstance(schema, dict) or not isinstance(schema.get("properties"), dict):
        return ""
    required = set(schema.get("required") or ())
    parts = []
    for name, spec in schema["properties"].items():
        kind = spec.get("type", "any") if isinstance(spec, dict) else "any"
        parts.append(f"{name}{'' if name in required else '?'}: {kind}")
    return ", ".join(parts)


def first_line(text: Any) -> str:
    return str(text or "").strip().splitlines()[0] if str(text or "").strip() else ""
