"""Two gateway processes on one PostgreSQL ledger and task store (D1): the same host
call through either one is one upstream run, and either one can answer its handle."""

from __future__ import annotations

import asyncio
import contextlib
import os
import secrets
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from conftest import BOUND_S, WINDOW_S, Host, Upstream, servers_of
from longcall.gateway import Gateway, GatewayOptions

pytestmark = [pytest.mark.anyio, pytest.mark.postgres]

DSN = os.environ.get("LONGCALL_PG_DSN", "postgresql://postgres@127.0.0.1:5432/test")


@contextlib.contextmanager
def pg_schemas(*prefixes: str) -> Iterator[list[str]]:
    """Fresh PostgreSQL schema URLs, dropped on exit (skipped without a server, failed
    when LONGCALL_REQUIRE_PG=1)."""
    import psycopg
    from psycopg import sql

    try:
        with psycopg.connect(DSN, connect_timeout=3) as conn:
            conn.execute("SELECT 1")
    except psycopg.Error as exc:
        if os.environ.get("LONGCALL_REQUIRE_PG") == "1":
            pytest.fail(f"LONGCALL_REQUIRE_PG=1 but no PostgreSQL at {DSN}: {exc}")
        pytest.skip(f"no PostgreSQL at {DSN}")
    names = [f"{prefix}_{secrets.token_hex(6)}" for prefix in prefixes]
    try:
        yield [f"{DSN}?schema={name}" for name in names]
    finally:
        with psycopg.connect(DSN, autocommit=True) as conn:
            for name in names:
                conn.execute(
                    sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(name))
                )


async def test_two_gateways_on_one_postgres_ledger_run_a_same_call_once(
    upstream: Upstream, http: httpx.AsyncClient, tmp_path: Path
) -> None:
    """The same call at two gateways at once: one handle, one upstream run; the other
    gateway answers the handle with the result."""
    with pg_schemas("lc_gw_ledger", "lc_gw_tasks") as (ledger, tasks):
        gateways = [
            Gateway(
                servers=servers_of(upstream.url),
                ledger=ledger,
                task_store=tasks,
                options=GatewayOptions(early_return_s=WINDOW_S),
                lease_s=2.0,
            )
            for _ in range(2)
        ]
        async with (
            gateways[0],
            gateways[1],
            gateways[0].running() as a,
            gateways[1].running() as b,
        ):
            first, second = await asyncio.gather(
                Host(http, a).call("slow", {"key": "pg"}),
                Host(http, b).call("slow", {"key": "pg"}),
            )
            handle = first["structuredContent"]["handle"]
            assert second["structuredContent"]["handle"] == handle
            upstream.release("pg")
            host = Host(http, b)
            reply = await host.call("longcall_status", {"handle": handle, "wait_s": WINDOW_S})
            async with asyncio.timeout(BOUND_S * 2):
                while "next" in reply.get("structuredContent", {}):
                    reply = await host.follow(reply)
            assert reply["structuredContent"] == {"items": [0, 1, 2]}
    assert upstream.runs["pg"] == 1
