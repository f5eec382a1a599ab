"""``longcall call``: one durable call, from the command line (SPEC O1).

A thin layer over :meth:`longcall.Client.call`: it reads the command line, asks the
client, and prints the result. Must not: decide anything the Python API does not.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import click

from longcall.cli.common import (
    LONGEST_WAIT_S,
    RESUME_KEY,
    UNRECORDED_KEY,
    FiniteFloatRange,
    client_for,
    json_option,
    ledger_option,
    ledger_shown,
    open_webhooks,
    outcome_exit,
    parse_fields,
    parse_json,
    qps_option,
    quiet_option,
    read_argument_text,
    run_async,
    servers_from,
    servers_option,
    shell_quote,
    unrecorded_check,
    webhook_address,
    webhook_listen_option,
)
from longcall.cli.show import ProgressView, ask_a_person, print_result, say_replayed
from longcall.client import (
    CallResult,
)
from longcall.core.keys import check_call_node_id
from longcall.errors import (
    InvalidArguments,
)


@click.command()
@click.argument("url", metavar="SERVER")
@click.argument("tool")
@click.option(
    "--args",
    "args_json",
    default="{}",
    metavar="JSON",
    help="Tool arguments, a JSON object; @FILE reads it from a file, - from stdin.",
)
@click.option("--node", default=None, help="Call node id (default: from the tool and arguments).")
@ledger_option
@click.option("--wait", is_flag=True, help="Wait until the call is settled and print its result.")
@click.option(
    "--timeout",
    "timeout_s",
    type=FiniteFloatRange(min=0, max=LONGEST_WAIT_S),
    default=None,
    help="With --wait: stop waiting after this many seconds (the call goes on).",
)
@json_option
@click.option(
    "--result",
    "result_only",
    is_flag=True,
    help="With --wait: print only the result (its structured content) as JSON, for pipes.",
)
@quiet_option
@click.option(
    "--protocol",
    default=None,
    help="mcp, 2026-07-28, 2025-11-25, aip-151 or apify (default: from the URL, then negotiated).",
)
@click.option(
    "--budget",
    "budget_s",
    type=FiniteFloatRange(min=0, min_open=True, max=LONGEST_WAIT_S),
    default=None,
    help="Give up waiting for the operation after this many seconds (an operator then decides).",
)
@qps_option
@click.option(
    "--answer",
    "answers",
    multiple=True,
    metavar="FIELD=VALUE",
    help="With --wait, answer the tool's form: FIELD=VALUE per field, e.g. approved=true"
    " (repeatable).",
)
@webhook_listen_option
@servers_option
@click.pass_context
def call(
    ctx: click.Context,
    url: str,
    tool: str,
    args_json: str,
    node: str | None,
    ledger_url: str | None,
    wait: bool,
    timeout_s: float | None,
    as_json: bool,
    result_only: bool,
    quiet: bool,
    protocol: str | None,
    budget_s: float | None,
    qps: float,
    answers: tuple[str, ...],
    webhook_listen: str | None,
    servers_path: Path | None,
) -> None:
    """Call TOOL at SERVER durably (a URL, or a name from the servers file); with --wait,
    until it is settled.

    Calling the same node again with the same URL, tool and arguments attaches to its
    operation (or prints its receipt, saying nothing was sent) and never submits twice;
    anything else on that node is refused. To make the same call again on purpose,
    give it a new node: --node NAME. Without --wait the command returns once the server holds the
    operation, and `longcall worker` or `longcall ops wait NODE` drives it on.

    With --wait, a question the tool asks is answered from --answer fields when they
    fit; otherwise it is shown with the `longcall ops answer` command that answers it,
    and the call waits for that answer (given from another terminal).

    \b
    Examples:
      longcall call http://127.0.0.1:8765/mcp sleep_report --args '{"seconds": 5, "rows": 3}' --wait
      longcall call http://127.0.0.1:8765/mcp approve --args '{"change": "x"}' \\
          --answer approved=true --wait
      longcall call http://127.0.0.1:8765/v1 crawl --args '{"pages": 2, "items_per_page": 5}'
      longcall call http://127.0.0.1:8765/mcp sleep_report --args @args.json --wait
      longcall call http://127.0.0.1:8765/mcp crawl --args '{"pages": 1, "items_per_page": 2}' \\
          --wait --result | jq .items
      longcall call reports sleep_report --servers servers.toml --wait   # a configured name
      longcall call reports report --wait --webhook-listen 0.0.0.0:8080  # polls sooner
    """
    if result_only and not wait:
        raise click.UsageError("--result prints a settled call's result: use it with --wait")
    if webhook_listen is not None and not wait:
        raise click.UsageError("--webhook-listen speeds up waiting: use it with --wait")
    webhook_at = webhook_address(webhook_listen) if webhook_listen is not None else None
    arguments = parse_json(read_argument_text(args_json, "--args"), "--args")
    if not isinstance(arguments, dict):
        raise click.BadParameter("must be a JSON object", param_hint="--args")
    fields = parse_fields(answers, "--answer")
    from longcall.client import checked_arguments, default_node_id

    try:
        arguments = checked_arguments(arguments)
    except InvalidArguments as exc:
        raise click.BadParameter(str(exc), param_hint="--args") from None
    # A server that cannot be named (a malformed URL, an unknown name) is refused
    # before the ledger is opened, or made.
    servers_from(servers_path).resolve(url)
    node = default_node_id(tool, arguments) if node is None else node
    check_call_node_id(node)  # an empty --node too: it is not "no --node"
    ctx.meta[RESUME_KEY] = f"longcall ops wait {shell_quote(node)}{ledger_shown(ledger_url)}"
    ctx.meta[UNRECORDED_KEY] = unrecorded_check(ledger_url, node)
    view = ProgressView(node, enabled=wait and not quiet)

    async def main() -> CallResult:
        refused: asyncio.Future[CallResult] = asyncio.get_running_loop().create_future()

        def refuse(error: BaseException) -> None:
            if not refused.done():
                refused.set_exception(error)

        async with client_for(
            ledger_url,
            create=True,
            connects=True,
            servers_path=servers_path,
            sign_in=True,
            poll_qps_max=qps,
            push=wait,  # returning once submitted: a push stream would only be dropped
            on_progress=view.update,
            on_input=ask_a_person(view, ledger_url, fields, refuse) if wait or fields else None,
        ) as client:
            receiving = None
            if webhook_at is not None:
                # Keys and socket first: a missing key or a taken port ends the command now.
                receiving = asyncio.ensure_future(open_webhooks(client, *webhook_at))
            with view:
                calling = asyncio.ensure_future(
                    client.call(
                        url,
                        tool,
                        arguments,
                        node=node,
                        protocol=protocol,
                        wait=wait,
                        through_input=True,
                        budget_s=budget_s,
                        timeout_s=timeout_s,
                    )
                )
                # --answer fields that do not fit the form end the command (the call
                # goes on, waiting for an answer), as `ops answer` refuses them.
                try:
                    await asyncio.wait({calling, refused}, return_when=asyncio.FIRST_COMPLETED)
                finally:
                    if not calling.done():
                        calling.cancel()
                        await asyncio.gather(calling, return_exceptions=True)
                    if receiving is not None:
                        receiving.cancel()
                        await asyncio.gather(receiving, return_exceptions=True)
                if refused.done():
                    return refused.result()
                return calling.result()

    result = run_async(main)
    if result.replayed and not result_only:
        say_replayed(result)
    if result_only and result.record.is_terminal:
        click.echo(json.dumps(result.structured, indent=2, sort_keys=True))
    else:
        print_result(result, as_json=as_json, ledger_url=ledger_url, asked=view.asked)
    if wait or result.settled:
        raise click.exceptions.Exit(int(outcome_exit(result)))
