"""Servers and credentials from a config file (C1), against a server that requires a token.

Regression: the caller could send no bearer token or header at all, so every caller was
the same anonymous principal and no authenticated server could be called. The token
must reach the server and nothing else: not the ledger file, not a receipt, not a log
line, not an error message.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
from pathlib import Path

import pytest
from tests.bounds import LOADED_MACHINE_S

from longcall.adapters.routing import Connector
from longcall.adapters.servers import load_servers
from longcall.core import State
from longcall.errors import ConfigError, MissingCredential, ToolNotAllowed
from longcall.ledger import SQLiteLedger
from longcall.runtime.executor import Executor
from longcall.server import build_reference_server
from longcall.server.auth import StaticTokens

from .conftest import call_to_terminal, serve

pytestmark = pytest.mark.anyio
TOKEN = "tok-7f3c9d2a-never-log-me"


def servers_file(tmp_path: Path, url: str, *, extra: str = "") -> Path:
    path = tmp_path / "servers.toml"
    path.write_text(
        f"""
[servers.reports]
url = "{url}"
allowed_tools = ["sleep_report"]
headers = {{ "X-Tenant" = "${{env:TENANT}}" }}
auth = {{ type = "bearer", token_env = "REPORTS_TOKEN" }}
{extra}
"""
    )
    return path


async def test_a_configured_token_reaches_the_server_and_nothing_else(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """The call completes as the token's principal; the token is nowhere we keep (C1)."""
    caplog.set_level(logging.DEBUG)
    monkeypatch.setenv("REPORTS_TOKEN", TOKEN)
    monkeypatch.setenv("TENANT", "acme")
    server = build_reference_server(
        store=f"sqlite:///{tmp_path / 'tasks.db'}", authenticator=StaticTokens({TOKEN: "alice"})
    )
    async with serve(server.asgi_app()) as url:
        connector = Connector(load_servers(servers_file(tmp_path, url)))
        ledger_path = tmp_path / "ledger.db"
        with SQLiteLedger(ledger_path, synchronous="normal") as ledger:
            executor = Executor(ledger, adapter_factory=connector, refresh_interval_s=0.2)
            try:
                arguments = {"seconds": 0.2, "rows": 2}
                record = await call_to_terminal(executor, url, "r1", "sleep_report", arguments)
                assert record.state is State.ACCEPTED, record.reconciliation_reason
                receipt = ledger.receipt("r1")
                with pytest.raises(ToolNotAllowed):
                    await executor.bind(url, "crawl")
            finally:
                await executor.aclose()
    assert_nowhere(TOKEN.encode(), tmp_path, json.dumps(repr(receipt)).encode())
    assert TOKEN not in caplog.text


def assert_nowhere(secret: bytes, directory: Path, *also: bytes) -> None:
    """The secret is in no file under ``directory`` (ledger, its WAL, the server's task
    store: it keeps a principal only) and in none of ``also``."""
    kept = [*also, *(p.read_bytes() for p in directory.iterdir() if p.is_file())]
    assert all(secret not in blob for blob in kept)


async def test_a_missing_secret_is_a_clear_error_without_the_secret(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An unset token variable is named; a wrong token is a 401 whose text holds no token."""
    monkeypatch.delenv("REPORTS_TOKEN", raising=False)
    monkeypatch.setenv("TENANT", "acme")
    config = load_servers(servers_file(tmp_path, "http://127.0.0.1:9/mcp"))
    with pytest.raises(MissingCredential, match="REPORTS_TOKEN"):
        await Connector(config)("http://127.0.0.1:9/mcp", "")
    monkeypatch.setenv("REPORTS_TOKEN", TOKEN + "-wrong")
    server = build_reference_server(
        store=f"sqlite:///{tmp_path / 'tasks.db'}", authenticator=StaticTokens({TOKEN: "alice"})
    )
    async with serve(server.asgi_app()) as url:
        connector = Connector(load_servers(servers_file(tmp_path, url)))
        with pytest.raises(Exception) as refused:
            await connector(url, "")
        assert "401" in str(refused.value) or "credential" in str(refused.value)
        assert TOKEN not in str(refused.value)


def test_mcp_host_json_and_url_rules(tmp_path: Path) -> None:
    """The ``mcpServers`` JSON of MCP hosts works; process entries are skipped with why;
    a URL carrying a credential is refused (it would be stored)."""
    path = tmp_path / "mcp.json"
    path.write_text(
        json.dumps(
            {
                "mcpServers": {
                    "remote": {"url": "https://tools.example/mcp", "headers": {"X-A": "b"}},
                    "local": {"command": "node", "args": ["server.js"]},
                }
            }
        )
    )
    config = load_servers(path)
    assert config.resolve("remote").url == "https://tools.example/mcp"
    assert config.resolve("https://tools.example/mcp").name == "remote"
    assert config.skipped
    assert "local" in config.skipped[0]
    with pytest.raises(ConfigError, match="no server named"):
        config.resolve("nope")
    with pytest.raises(ConfigError, match="credential"):
        config.resolve("https://user:pw@tools.example/mcp")
    assert "b" not in repr(config.resolve("remote"))


OAUTH_REFUSED = [
    ('{ type = "oauth", client_secret_env = "S" }', "needs its client_id"),
    ('{ type = "oauth", client_id = "c", grant = "password" }', "auth.grant must be one of"),
    ('{ type = "oauth", client_id = "c", grant = "client_credentials" }', "needs the client's"),
    (
        '{ type = "oauth", client_id = "c", private_key_file = "k.pem" }',
        "client-credentials assertions only",
    ),
    (
        (
            '{ type = "oauth", client_id = "c", client_secret_env = "S", private_key_env = "K",'
            ' grant = "client_credentials" }'
        ),
        "not both",
    ),
    (
        '{ type = "oauth", client_id = "c", client_secret_env = "S", client_secret_file = "f" }',
        "one of client_secret_env",
    ),
    (
        (
            '{ type = "oauth", client_id = "c", client_secret_env = "S",'
            ' token_endpoint_auth_method = "private_key_jwt" }'
        ),
        "token_endpoint_auth_method must be one of",
    ),
    (
        (
            '{ type = "oauth", client_id = "c", grant = "client_credentials",'
            ' private_key_env = "K", signing_algorithm = "none" }'
        ),
        "signing_algorithm must be one of",
    ),
    ('{ type = "oauth", client_id = "c", signing_algorithm = "ES256" }', "applies to a private"),
    ('{ type = "oauth", client_id = "c", issuer = "login.example" }', "not an http"),
    ('{ type = "oauth", client_id = "" }', "non-empty string"),
    ('{ type = "oauth", clientid = "c" }', "takes no clientid"),
    ('{ type = "oauth", token_env = "T" }', "takes no token_env"),
    ('{ type = "bearer", token_env = "T", client_id = "c" }', "takes no client_id"),
]


@pytest.mark.parametrize(("auth", "why"), OAUTH_REFUSED)
def test_an_oauth_client_the_flows_cannot_use_is_refused_when_read(
    tmp_path: Path, auth: str, why: str
) -> None:
    """Every combination no OAuth flow can use is a ConfigError when the file is read,
    not a failure at the authorization server later; an unknown key is never ignored."""
    path = tmp_path / "servers.toml"
    path.write_text(f'[servers.r]\nurl = "https://r.example/mcp"\nauth = {auth}\n')
    with pytest.raises(ConfigError, match=why):
        load_servers(path)


async def test_a_registered_oauth_clients_secret_is_read_at_connect_and_never_shown(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The secret is read when the connection is made (an unset variable is named, the
    secret never), and the configuration holds where it is, not what it is. A client
    the authorization server does not take is never replaced by a registration."""
    from mcp.shared.auth import OAuthClientInformationFull

    from longcall.adapters.oauth import (
        AuthorizationFailed,
        RegisteredClientStorage,
        token_file_for,
    )

    path = tmp_path / "servers.toml"
    path.write_text(
        '[servers.r]\nurl = "http://127.0.0.1:9/mcp"\nauth = { type = "oauth",'
        ' grant = "client_credentials", client_id = "svc", client_secret_env = "R_SECRET",'
        ' issuer = "https://login.example" }\n'
    )
    config = load_servers(path).resolve("r")
    client = config.oauth_client
    assert client is not None
    assert (client.client_id, client.grant, client.issuer) == (
        "svc",
        "client_credentials",
        "https://login.example",
    )
    monkeypatch.delenv("R_SECRET", raising=False)
    connector = Connector(load_servers(path), token_dir=tmp_path / "oauth")
    with pytest.raises(MissingCredential, match="R_SECRET holding its client secret"):
        await connector("http://127.0.0.1:9/mcp", "")
    monkeypatch.setenv("R_SECRET", "s3cret-never-shown")
    assert client.secret("r") == "s3cret-never-shown"
    assert "s3cret" not in repr(config) + repr(client)
    # Tokens belong to the client they were issued to: another client's are never sent.
    url = "http://127.0.0.1:9/mcp"
    files = {token_file_for(tmp_path, url, c) for c in (None, "svc", "other")}
    assert len(files) == 3
    assert token_file_for(tmp_path, url) == token_file_for(tmp_path, url, None)
    storage = RegisteredClientStorage(
        tmp_path / "tokens.json",
        OAuthClientInformationFull(client_id="svc", redirect_uris=None),
    )
    assert (await storage.get_client_info()) is storage.client
    with pytest.raises(AuthorizationFailed, match="does not register another"):
        await storage.set_client_info(
            OAuthClientInformationFull(client_id="other", redirect_uris=None)
        )


async def test_the_cli_calls_a_configured_server_by_name(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``longcall call NAME TOOL --servers FILE``: the name resolves to its URL and its
    token; the call completes, and the token is in none of the command's output or
    files (C1)."""
    import sys

    server = build_reference_server(
        store=f"sqlite:///{tmp_path / 'tasks.db'}", authenticator=StaticTokens({TOKEN: "alice"})
    )
    async with serve(server.asgi_app()) as url:
        path = servers_file(tmp_path, url)
        env = {
            **os.environ,
            "REPORTS_TOKEN": TOKEN,
            "TENANT": "acme",
            "LONGCALL_TOKEN_DIR": str(tmp_path / "oauth"),
        }
        process = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "longcall", "call", "reports", "sleep_report",
            "--args", '{"seconds": 0.1, "rows": 1}', "--servers", str(path),
            "--ledger", f"sqlite:///{tmp_path / 'cli-ledger.db'}", "--wait", "--json",
            env=env, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        )  # fmt: skip
        async with asyncio.timeout(LOADED_MACHINE_S):
            out, err = await process.communicate()
    assert process.returncode == 0, err.decode()
    assert json.loads(out)["outcome"] == "ok"
    assert TOKEN.encode() not in out + err
    assert_nowhere(TOKEN.encode(), tmp_path)
