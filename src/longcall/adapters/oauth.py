"""OAuth 2.1 for servers that require it, through the official MCP SDK's client (C1).

Owns: :func:`oauth_auth` — an ``httpx.Auth`` for our HTTP driver that runs the ``mcp``
SDK's :class:`~mcp.client.auth.OAuthClientProvider` (protected-resource and
authorization-server discovery, dynamic client registration, PKCE, token refresh), or,
for a client the authorization server registered beforehand, the same provider with that
client (no registration) or the SDK's client-credentials providers (a secret, or a
private key signing an assertion: nobody signs in);
:class:`FileTokenStorage`, which keeps tokens and the registered client in a file of
mode 0600 outside the ledger; and the authorization step: the authorization URL is
first followed without a person (a server that approves this client at once redirects
straight to our redirect URI), otherwise shown to the person, whose browser comes back
to a one-shot listener on 127.0.0.1.

Why a bridge: the SDK's provider is an ``httpx2.Auth`` (the SDK moved to the httpx2
fork); our driver is httpx. :class:`SdkAuth` carries each request and response of the
SDK's auth flow across, unchanged — the OAuth logic stays the SDK's.

Must not: log, print or store a token anywhere but the token file.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import os
from collections.abc import AsyncGenerator, Callable
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import httpx
import httpx2
from mcp.client.auth import OAuthClientProvider
from mcp.client.auth.extensions.client_credentials import (
    ClientCredentialsOAuthProvider,
    PrivateKeyJWTOAuthProvider,
    SignedJWTParameters,
)
from mcp.shared.auth import (
    AuthorizationCodeResult,
    OAuthClientInformationFull,
    OAuthClientMetadata,
    OAuthToken,
)

from longcall.adapters.servers import OAuthClient, default_token_dir
from longcall.errors import AuthorizationFailed

CALLBACK_WAIT_S = 300.0
"""How long the one-shot listener waits for the person's browser to come back."""
CLIENT_NAME = "longcall"


class FileTokenStorage:
    """Tokens and client registration of one server, in a 0600 JSON file (C1)."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def _read(self) -> dict[str, Any]:
        try:
            data = json.loads(self.path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return {}
        return data if isinstance(data, dict) else {}

    def _write(self, data: dict[str, Any]) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        # Created 0600 from the start: no window in which another user could read it.
        descriptor = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(descriptor, "w", encoding="utf-8") as handle:
            json.dump(data, handle)
        os.chmod(self.path, 0o600)

    async def get_tokens(self) -> OAuthToken | None:
        tokens = self._read().get("tokens")
        return OAuthToken.model_validate(tokens) if tokens else None

    async def set_tokens(self, tokens: OAuthToken) -> None:
        data = self._read()
        data["tokens"] = tokens.model_dump(mode="json", exclude_none=True)
        self._write(data)

    async def get_client_info(self) -> OAuthClientInformationFull | None:
        info = self._read().get("client")
        return OAuthClientInformationFull.model_validate(info) if info else None

    async def set_client_info(self, client_info: OAuthClientInformationFull) -> None:
        data = self._read()
        data["client"] = client_info.model_dump(mode="json", exclude_none=True)
        self._write(data)


class RegisteredClientStorage(FileTokenStorage):
    """Tokens in the file; the client is the one configured, never replaced: a
    registration the SDK would store instead (the authorization server did not take
    the configured client) is refused."""

    def __init__(self, path: Path, client: OAuthClientInformationFull) -> None:
        super().__init__(path)
        self.client = client

    async def get_client_info(self) -> OAuthClientInformationFull | None:
        return self.client

    async def set_client_info(self, client_info: OAuthClientInformationFull) -> None:
        raise AuthorizationFailed(
            f"the authorization server did not take the configured client "
            f"{self.client.client_id!r}, and longcall does not register another in its place"
        )


def token_file_for(directory: Path, server_url: str, client_id: str | None = None) -> Path:
    """The token file of one server (and of the client registered beforehand that the
    tokens were issued to, if any: another client's tokens are never sent): named by a
    digest of the URL and the client id."""
    key = server_url if client_id is None else f"{server_url}\n{client_id}"
    name = hashlib.sha256(key.encode()).hexdigest()[:24]
    return directory / f"{name}.json"


class SdkAuth(httpx.Auth):
    """Runs an ``httpx2.Auth`` flow (the SDK's) for an httpx client."""

    requires_response_body = True

    def __init__(self, inner: httpx2.Auth) -> None:
        self.inner = inner

    async def async_auth_flow(
        self, request: httpx.Request
    ) -> AsyncGenerator[httpx.Request, httpx.Response]:
        flow = self.inner.async_auth_flow(_to_httpx2(request))
        outgoing = await flow.__anext__()
        while True:
            response = yield _to_httpx(outgoing)
            await response.aread()
            try:
                outgoing = await flow.asend(_to_httpx2_response(response, outgoing))
            except StopAsyncIteration:
                return


def _to_httpx2(request: httpx.Request) -> httpx2.Request:
    return httpx2.Request(
        request.method, str(request.url), headers=list(request.headers.raw), content=request.content
    )


def _to_httpx(request: httpx2.Request) -> httpx.Request:
    return httpx.Request(
        request.method, str(request.url), headers=list(request.headers.raw), content=request.content
    )


def _to_httpx2_response(response: httpx.Response, request: httpx2.Request) -> httpx2.Response:
    return httpx2.Response(
        response.status_code,
        headers=list(response.headers.raw),
        content=response.content,
        request=request,
    )


class Authorizer:
    """The authorization step of the code grant: without a person when the server
    approves at once, otherwise through the person's browser and a local listener —
    or, with nobody to ``announce`` the URL to (a worker), a clear failure at once."""

    def __init__(
        self, *, announce: Callable[[str], None] | None, wait_s: float = CALLBACK_WAIT_S
    ) -> None:
        self.announce = announce
        self.wait_s = wait_s
        self._result: AuthorizationCodeResult | None = None
        self._server: asyncio.AbstractServer | None = None
        self._arrived: asyncio.Future[AuthorizationCodeResult] | None = None
        self.redirect_uri = ""

    async def start(self) -> str:
        """Open the one-shot listener; returns the redirect URI to register."""
        loop = asyncio.get_running_loop()
        self._arrived = loop.create_future()
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        port = self._server.sockets[0].getsockname()[1]
        self.redirect_uri = f"http://127.0.0.1:{port}/callback"
        return self.redirect_uri

    async def redirect(self, authorization_url: str) -> None:
        """Follow the authorization URL; a redirect to us carries the code at once."""
        async with httpx.AsyncClient(follow_redirects=False, timeout=15.0) as http:
            with contextlib.suppress(httpx.HTTPError):
                reply = await http.get(authorization_url)
                location = reply.headers.get("location", "")
                if reply.is_redirect and location.startswith(self.redirect_uri):
                    self._result = _code_of(location)
                    return
        if self.announce is None:
            raise AuthorizationFailed(
                "the server needs a person to sign in; run the call once from a terminal "
                "(longcall call …) to authorize this caller"
            )
        self.announce(authorization_url)

    async def callback(self) -> AuthorizationCodeResult:
        if self._result is not None:
            return self._result
        assert self._arrived is not None
        try:
            return await asyncio.wait_for(self._arrived, self.wait_s)
        except TimeoutError as exc:
            raise AuthorizationFailed(f"no authorization arrived within {self.wait_s:g} s") from exc

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        with contextlib.suppress(Exception):
            line = (await asyncio.wait_for(reader.readline(), 10.0)).decode("latin-1")
            target = line.split(" ")[1] if line.count(" ") >= 2 else "/"
            result = _code_of("http://127.0.0.1" + target)
            body = b"Authorization received; you can close this window."
            writer.write(
                b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: "
                + str(len(body)).encode()
                + b"\r\nConnection: close\r\n\r\n"
                + body
            )
            await writer.drain()
            if self._arrived is not None and not self._arrived.done():
                self._arrived.set_result(result)
        writer.close()

    async def aclose(self) -> None:
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()


def _code_of(location: str) -> AuthorizationCodeResult:
    query = parse_qs(urlsplit(location).query)
    if "error" in query:
        raise AuthorizationFailed(f"authorization refused: {query['error'][0]}")
    code = query.get("code", [""])[0]
    if not code:
        raise AuthorizationFailed("the authorization redirect carries no code")
    state = query.get("state", [None])[0]
    iss = query.get("iss", [None])[0]
    return AuthorizationCodeResult(code=code, state=state, iss=iss)


async def oauth_auth(
    server_url: str,
    *,
    token_dir: Path,
    announce: Callable[[str], None] | None,
    scope: str | None = None,
    client: OAuthClient | None = None,
    server_name: str | None = None,
) -> tuple[httpx.Auth, Authorizer | None]:
    """An ``httpx.Auth`` doing OAuth 2.1 against ``server_url`` with the SDK's provider:
    with ``client``, the one registered beforehand (its secret or key read now, raising
    :class:`~longcall.adapters.servers.MissingCredential`), else one registered
    dynamically. Close the returned :class:`Authorizer` (None: nobody signs in) when done."""
    tokens = token_file_for(token_dir, server_url, client.client_id if client else None)
    name = server_name or server_url
    if client is not None and client.grant == "client_credentials":
        return SdkAuth(_client_credentials(server_url, tokens, client, name)), None
    secret = client.secret(name) if client is not None else None  # before a listener opens
    authorizer = Authorizer(announce=announce)
    redirect_uri = await authorizer.start()
    method = "none"
    if client is not None and secret is not None:
        method = client.token_endpoint_auth_method
    metadata = OAuthClientMetadata(
        client_name=CLIENT_NAME,
        redirect_uris=[redirect_uri],  # type: ignore[list-item]
        grant_types=["authorization_code", "refresh_token"],
        response_types=["code"],
        token_endpoint_auth_method=method,  # type: ignore[arg-type]
        scope=scope if client is None else client.scope,
    )
    storage = FileTokenStorage(tokens)
    if client is not None:
        # RFC 8252 section 7.3: a loopback redirect URI may take any port, so the
        # listener's is the registered one's.
        registered = OAuthClientInformationFull(
            **metadata.model_dump(exclude_none=True),
            client_id=client.client_id,
            client_secret=secret,
            issuer=client.issuer,
        )
        storage = RegisteredClientStorage(tokens, registered)
    provider = OAuthClientProvider(
        server_url,
        metadata,
        storage,
        redirect_handler=authorizer.redirect,
        callback_handler=authorizer.callback,
    )
    return SdkAuth(provider), authorizer


def _client_credentials(
    server_url: str, tokens: Path, client: OAuthClient, name: str
) -> OAuthClientProvider:
    """The SDK's provider for the client-credentials grant (nobody signs in): with the
    client's secret, or with its private key signing each assertion (RFC 7523)."""
    storage = FileTokenStorage(tokens)
    key = client.private_key(name)
    if key is not None:
        assertion = SignedJWTParameters(
            issuer=client.client_id,
            subject=client.client_id,
            signing_key=key,
            signing_algorithm=client.signing_algorithm,
        )
        return PrivateKeyJWTOAuthProvider(
            server_url,
            storage,
            client.client_id,
            assertion.create_assertion_provider(),
            scope=client.scope,
            issuer=client.issuer,
        )
    secret = client.secret(name)
    assert secret is not None  # the servers file refuses a grant without either
    return ClientCredentialsOAuthProvider(
        server_url,
        storage,
        client.client_id,
        secret,
        token_endpoint_auth_method=client.token_endpoint_auth_method,  # type: ignore[arg-type]
        scope=client.scope,
        issuer=client.issuer,
    )


__all__ = [
    "AuthorizationFailed",
    "Authorizer",
    "FileTokenStorage",
    "RegisteredClientStorage",
    "SdkAuth",
    "default_token_dir",
    "oauth_auth",
    "token_file_for",
]
