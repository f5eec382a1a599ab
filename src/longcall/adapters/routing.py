"""Which adapter speaks to a URL: AIP-151, Apify-style early return, or MCP (SPEC P3, P4, O1).

Owns: :func:`connect_any`, the one entry the runtime's adapter factory calls with a
server URL and an optional protocol, and :func:`protocol_of_url`, the discovery by
path (``…/v1…`` → AIP-151, ``…/apify/mcp`` → Apify-style, anything else → MCP, whose
version is negotiated by :func:`longcall.adapters.mcp.client.connect`).

Must not: negotiate MCP itself (``mcp.negotiate`` does), import ``ledger``/``runtime``/
``server``, or guess: an explicit protocol always wins over the path.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any, Protocol
from urllib.parse import urlsplit

import httpx

from longcall.adapters.base import Adapter, AdapterError
from longcall.adapters.servers import ServerConfig, ServersConfig
from longcall.adapters.shell import MappedAdapter

AIP151 = "aip-151"
APIFY = "apify"
MCP = "mcp"
ALIASES = {
    "aip-151": AIP151,
    "aip151": AIP151,
    "google": AIP151,
    "apify": APIFY,
    "apify-early-return": APIFY,
    "mcp": MCP,
}
"""``--protocol`` spellings; MCP version names (2026-07-28, 2025-11-25) pass through."""

log = logging.getLogger("longcall.adapters")


def protocol_of_url(url: str) -> str:
    """The protocol family a URL's path names: ``aip-151``, ``apify`` or ``mcp``."""
    path = urlsplit(url).path.rstrip("/")
    if path.endswith("/apify/mcp"):
        return APIFY
    segments = path.split("/")
    if "v1" in segments or any(s.startswith("v1:") for s in segments):
        return AIP151
    return MCP


async def connect_any(
    url: str,
    prefer: str | None = None,
    *,
    headers: Mapping[str, str] | None = None,
    auth: httpx.Auth | None = None,
    session: Mapping[str, Any] | None = None,
    on_session: Callable[[Mapping[str, Any] | None], None] | None = None,
    login: Callable[[], Awaitable[httpx.Auth]] | None = None,
) -> Adapter:
    """A connected adapter for ``url``: ``prefer`` (a family or an MCP version) if given,
    else the family its path names. MCP goes through ``mcp.client.connect``.
    ``headers`` and ``auth`` (credentials, C1) go on every request of the adapter;
    ``session`` is the one a stateful MCP server issued this caller before, and
    ``on_session`` hears of every change to it (kept for every process of the caller)."""
    family = ALIASES.get(prefer.lower()) if prefer else None
    if prefer and family is None and not prefer[:4].isdigit():
        raise AdapterError(
            f"unknown protocol {prefer!r}: use aip-151, apify, mcp or an MCP version"
        )
    if family is None:
        family = protocol_of_url(url) if not prefer else MCP
    if family == AIP151:
        from longcall.adapters.aip151.client import connect as connect_aip151

        return await connect_aip151(url, headers=headers)
    if family == APIFY:
        from longcall.adapters.apify.client import connect as connect_apify

        return await connect_apify(url, headers=headers)
    from longcall.adapters.mcp.client import connect

    mcp_version = None if prefer is None or prefer.lower() == MCP else prefer
    adapter_: Adapter = await connect(
        url,
        prefer=mcp_version,
        headers=headers,
        auth=auth,
        session=session,
        on_session=on_session,
        login=login,
    )
    return adapter_


class SessionStore(Protocol):
    """Where a caller keeps the sessions stateful servers issued it (the ledger)."""

    def server_session(self, server: str) -> dict[str, Any] | None: ...

    def put_server_session(self, server: str, session: Mapping[str, Any] | None) -> None: ...


class Connector:
    """Builds the adapter for a server with the credentials the servers file gives it
    (C1): headers and bearer tokens read at connect time, OAuth 2.1 through the MCP SDK
    (configured, or started when a server without configured credentials answers 401)
    with tokens in 0600 files under ``token_dir``, and the server's allowed tools.
    Records carry the URL alone; nothing here reaches the ledger. Use it as the
    executor's adapter factory; close it when done.

    ``announce`` shows a person the authorization URL when a login needs one; without
    it (a worker) such a login fails at once with what to do, instead of waiting."""

    def __init__(
        self,
        servers: ServersConfig | None = None,
        *,
        token_dir: Path | None = None,
        announce: Callable[[str], None] | None = None,
        sessions: SessionStore | None = None,
    ) -> None:
        self.servers = servers or ServersConfig()
        self.sessions = sessions
        self.token_dir = token_dir
        self.announce = announce
        self._authorizers: list[Any] = []
        self._session_thread: ThreadPoolExecutor | None = None

    def config_for(self, server: str) -> ServerConfig:
        return self.servers.find(server) or ServerConfig(name=server, url=server)

    async def __call__(self, server: str, protocol: str) -> Adapter:
        config = self.config_for(server)
        auth = await self._oauth(config) if config.auth == "oauth" else None
        adapter = await self._connect(config, protocol, auth)
        if config.allowed_tools is not None and isinstance(adapter, MappedAdapter):
            adapter.allowed_tools = config.allowed_tools
        return adapter

    async def _connect(
        self, config: ServerConfig, protocol: str, auth: httpx.Auth | None
    ) -> Adapter:
        # A server with no configured credentials that asks for a bearer token gets an
        # OAuth login (the MCP SDK's), wherever in the conversation it asks.
        may_log_in = config.auth == "none" and self.token_dir is not None
        kept = None
        if self.sessions is not None:
            kept = await asyncio.get_running_loop().run_in_executor(
                self._sessions_io(), self.sessions.server_session, config.url
            )
        return await connect_any(
            config.url,
            protocol or config.protocol,
            headers=config.credential_headers(),
            auth=auth,
            session=kept,
            on_session=(lambda s: self._keep_session(config.url, s)) if self.sessions else None,
            login=(lambda: self._oauth(config)) if may_log_in else None,
        )

    def _sessions_io(self) -> ThreadPoolExecutor:
        """The one thread that reads and writes the session store (the ledger): beside
        the event loop, which never waits for a ledger commit, and in order, so a read
        sees every write asked for before it."""
        if self._session_thread is None:
            self._session_thread = ThreadPoolExecutor(1, thread_name_prefix="longcall-sessions")
        return self._session_thread

    def _keep_session(self, url: str, session: Mapping[str, Any] | None) -> None:
        """Store a server's session for the caller's other processes, without waiting:
        a session that was not stored costs the next process a new one, nothing more."""
        assert self.sessions is not None
        write = self._sessions_io().submit(self.sessions.put_server_session, url, session)
        write.add_done_callback(_log_failed_write)

    async def _oauth(self, config: ServerConfig) -> httpx.Auth:
        from longcall.adapters.oauth import oauth_auth

        if self.token_dir is None:
            raise AdapterError(f"server {config.name!r} needs OAuth, but no token directory is set")
        auth, authorizer = await oauth_auth(
            config.url,
            token_dir=self.token_dir,
            announce=self.announce,
            client=config.oauth_client,
            server_name=config.name,
        )
        if authorizer is not None:
            self._authorizers.append(authorizer)
        return auth

    async def aclose(self) -> None:
        """End the OAuth logins, and let every session write land (the ledger closes
        after this)."""
        for authorizer in self._authorizers:
            await authorizer.aclose()
        self._authorizers.clear()
        if self._session_thread is not None:
            thread, self._session_thread = self._session_thread, None
            await asyncio.to_thread(thread.shutdown, wait=True)


def _log_failed_write(write: Future[None]) -> None:
    error = write.exception()
    if error is not None:
        log.warning("a server session could not be stored: %s", error)


def carried_versions() -> frozenset[tuple[str, str]]:
    """The (protocol, adapter version) pairs the adapters of this build bind new
    operations to: what a worker of this build can drive (R2, P6). A worker that names
    no versions runs these, so a worker of an older build never drives an operation
    that a newer build's adapter version owns. MCP's plain-tools path binds the
    negotiated version (``2025-06-18/sync``), so every version it accepts appears with
    ``/sync``."""
    from longcall.adapters.aip151 import mapping as aip151
    from longcall.adapters.apify import mapping as apify
    from longcall.adapters.mcp import legacy, modern, sync
    from longcall.adapters.mcp.rpc import OLDER_VERSIONS

    tasks = {
        (aip151.PROTOCOL, aip151.ADAPTER_VERSION),
        (apify.PROTOCOL, apify.ADAPTER_VERSION),
        (modern.PROTOCOL, modern.ADAPTER_VERSION),
        (legacy.PROTOCOL, legacy.ADAPTER_VERSION),
    }
    plain = {
        (f"{version}/sync", sync.ADAPTER_VERSION)
        for version in (modern.PROTOCOL, legacy.PROTOCOL, *OLDER_VERSIONS)
    }
    return frozenset(tasks | plain)
