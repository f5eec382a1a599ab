"""Which servers a caller may call, and with which credentials (C1).

Owns: :class:`ServerConfig` (URL, protocol, headers, how to obtain a token, the poll QPS
cap, the allowed tools) and :class:`ServersConfig` (a set of them by name), read from a
TOML file or from the ``mcpServers`` JSON that MCP hosts already use; and
:meth:`ServerConfig.credential_headers`, which reads secrets (an environment variable, a
file) only when a request is about to be sent. Secrets never reach the ledger, a log, a
receipt or an error message: they are read at the edge and handed to the HTTP driver;
records carry the URL alone, and a URL with a password in it is refused.

TOML::

    [servers.reports]
    url = "https://reports.example.com/mcp"
    protocol = "2026-07-28"            # optional; otherwise negotiated
    poll_qps_max = 5                   # optional; this server's poll budget
    allowed_tools = ["report"]         # optional; other tools are refused
    headers = { "X-Tenant" = "acme" }  # values may use ${env:NAME}
    auth = { type = "bearer", token_env = "REPORTS_TOKEN" }  # or token_file = "..."
    webhook = { secret_env = "REPORTS_WEBHOOK_SECRET" }  # or secret_file = "..."; its
    # deliveries are taken at POST /webhooks/reports and wake only its operations
    # auth = { type = "oauth" }        # OAuth 2.1 through the official MCP SDK

    # OAuth with a client the authorization server registered beforehand (no dynamic
    # registration): a person signs in once (authorization code), or nobody does
    # (client credentials, with a secret or a private key that signs an assertion).
    # auth = { type = "oauth", client_id = "longcall-prod", client_secret_env = "SECRET",
    #          issuer = "https://login.example.com" }
    # auth = { type = "oauth", grant = "client_credentials", client_id = "svc",
    #          client_secret_file = "~/.config/reports.secret" }
    # auth = { type = "oauth", grant = "client_credentials", client_id = "svc",
    #          private_key_file = "~/.config/reports.pem", signing_algorithm = "ES256" }

JSON (MCP hosts): ``{"mcpServers": {"reports": {"url": "…", "headers": {…}}}}`` (or
``"servers"``; ``"webhook": {"secret_env": "…"}`` as in TOML); entries that start a
local process (``command``) are skipped: longcall calls servers over HTTP only.

Must not: log or put a secret in a message; read a secret before it is needed.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import platformdirs

from longcall.errors import ConfigError, MissingCredential

SERVERS_ENV = "LONGCALL_SERVERS"
"""The servers file to read when none is named."""
ENV_REFERENCE = re.compile(r"\$\{(?:env:)?([A-Za-z_][A-Za-z0-9_]*)\}")
"""``${env:NAME}`` or ``${NAME}`` in a header value: read from the environment at use."""
AUTH_TYPES = ("none", "bearer", "oauth")
OAUTH_GRANTS = ("authorization_code", "client_credentials")
SECRET_AUTH_METHODS = ("client_secret_basic", "client_secret_post")
"""How a client secret is presented at the token endpoint (RFC 6749 section 2.3.1)."""
DEFAULT_SIGNING_ALGORITHM = "RS256"
SIGNING_ALGORITHMS = ("RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "ES256", "ES384")
"""What a private key may sign a client assertion with (RFC 7523)."""
_TOKEN_KEYS = {"type", "token_env", "token_file"}
_OAUTH_CLIENT_KEYS = {
    "client_id",
    "grant",
    "issuer",
    "scope",
    "client_secret_env",
    "client_secret_file",
    "private_key_env",
    "private_key_file",
    "signing_algorithm",
    "token_endpoint_auth_method",
}


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class OAuthClient:
    """An OAuth client the server's authorization server registered beforehand (C1):
    its id, the grant it uses, and where its secret or private key is read from (the
    names only; the secrets are read at connect time, never kept here)."""

    client_id: str
    grant: str = "authorization_code"
    issuer: str | None = None
    """The authorization server that registered the client: tokens are asked of it only."""
    scope: str | None = None
    client_secret_env: str | None = None
    client_secret_file: str | None = None
    private_key_env: str | None = None
    private_key_file: str | None = None
    signing_algorithm: str = DEFAULT_SIGNING_ALGORITHM
    token_endpoint_auth_method: str = SECRET_AUTH_METHODS[0]
    """With a secret: how it is presented (basic or post)."""

    @property
    def has_secret(self) -> bool:
        return self.client_secret_env is not None or self.client_secret_file is not None

    @property
    def has_private_key(self) -> bool:
        return self.private_key_env is not None or self.private_key_file is not None

    def secret(self, server: str, environ: Mapping[str, str] | None = None) -> str | None:
        """The client secret, read now (None for a public client)."""
        if not self.has_secret:
            return None
        env = os.environ if environ is None else environ
        return _read_secret(
            server, "client secret", self.client_secret_env, self.client_secret_file, env
        )

    def private_key(self, server: str, environ: Mapping[str, str] | None = None) -> str | None:
        """The PEM private key that signs the client's assertions, read now."""
        if not self.has_private_key:
            return None
        env = os.environ if environ is None else environ
        return _read_secret(
            server, "private key", self.private_key_env, self.private_key_file, env, strip=False
        )


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class ServerConfig:
    """One server a caller may call (C1)."""

    name: str
    url: str
    protocol: str | None = None
    headers: Mapping[str, str] = dataclasses.field(default_factory=dict)
    """As configured: values may hold ``${env:NAME}`` references, resolved at use."""
    auth: str = "none"
    token_env: str | None = None
    token_file: str | None = None
    poll_qps_max: float | None = None
    allowed_tools: frozenset[str] | None = None
    oauth_client: OAuthClient | None = None
    """OAuth with a registered client; None: dynamic registration (``auth = "oauth"``)."""
    webhook_secret_env: str | None = None
    webhook_secret_file: str | None = None
    """Where this server's webhook key(s) are read (whsec_… or whpk_…, several while
    rotating): its deliveries are verified with them alone, at ``/webhooks/NAME``."""

    @property
    def has_webhook_keys(self) -> bool:
        return self.webhook_secret_env is not None or self.webhook_secret_file is not None

    def webhook_keys(self, environ: Mapping[str, str] | None = None) -> str:
        """This server's webhook key text, read now (MissingCredential when absent)."""
        env = os.environ if environ is None else environ
        return _read_secret(
            self.name, "webhook key", self.webhook_secret_env, self.webhook_secret_file, env
        )

    def __repr__(self) -> str:  # never the header values: they may be secrets
        return f"ServerConfig(name={self.name!r}, url={self.url!r}, auth={self.auth!r})"

    def allows(self, tool_name: str) -> bool:
        return self.allowed_tools is None or tool_name in self.allowed_tools

    def credential_headers(self, environ: Mapping[str, str] | None = None) -> dict[str, str]:
        """The headers to send, secrets resolved now (raises :class:`MissingCredential`)."""
        env = os.environ if environ is None else environ
        headers = {name: _expand(value, env, self.name) for name, value in self.headers.items()}
        if self.auth == "bearer":
            headers["Authorization"] = f"Bearer {self._token(env)}"
        return headers

    def _token(self, env: Mapping[str, str]) -> str:
        return _read_secret(self.name, "token", self.token_env, self.token_file, env)


def _read_secret(
    server: str,
    what: str,
    env_name: str | None,
    file_name: str | None,
    env: Mapping[str, str],
    *,
    strip: bool = True,
) -> str:
    """A secret from the environment variable or the file it is configured in (exactly
    one is), or :class:`MissingCredential` naming where it was looked for, never it."""
    if env_name is not None:
        value = env.get(env_name)
        if not value:
            raise MissingCredential(
                f"server {server!r}: the environment variable {env_name} holding its "
                f"{what} is not set"
            )
        return value.strip() if strip else value
    assert file_name is not None
    path = Path(file_name).expanduser()
    try:
        value = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise MissingCredential(
            f"server {server!r}: cannot read its {what} file {path}: {exc.strerror}"
        ) from exc
    if not value.strip():
        raise MissingCredential(f"server {server!r}: its {what} file {path} is empty")
    return value.strip() if strip else value


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class ServersConfig:
    """The servers a caller knows by name."""

    servers: Mapping[str, ServerConfig] = dataclasses.field(default_factory=dict)
    skipped: tuple[str, ...] = ()
    """Entries that could not be used (a local process), with why."""

    def find(self, name_or_url: str) -> ServerConfig | None:
        """The server of this name, or the one whose URL this is."""
        if name_or_url in self.servers:
            return self.servers[name_or_url]
        for server in self.servers.values():
            if server.url.rstrip("/") == name_or_url.rstrip("/"):
                return server
        return None

    def resolve(self, name_or_url: str) -> ServerConfig:
        """A configured server, or an unconfigured URL (no credentials), or a clear error."""
        found = self.find(name_or_url)
        if found is not None:
            return found
        if "://" not in name_or_url:
            known = ", ".join(sorted(self.servers)) or "none"
            raise ConfigError(
                f"no server named {name_or_url!r} is configured (known: {known}); "
                "give a URL or add it to the servers file"
            )
        check_url(name_or_url)
        return ServerConfig(name=name_or_url, url=name_or_url)


def default_servers_path() -> Path:
    """``$LONGCALL_SERVERS``, else ``servers.toml`` in the user's config directory."""
    configured = os.environ.get(SERVERS_ENV)
    if configured:
        return Path(configured).expanduser()
    return Path(platformdirs.user_config_dir("longcall")) / "servers.toml"


def default_token_dir() -> Path:
    """Where OAuth tokens are kept: ``$LONGCALL_TOKEN_DIR``, else the user's data directory
    (never beside the ledger, which may be shared or copied). Here, not in the OAuth
    module, so that a caller learns the place without loading the OAuth client."""
    configured = os.environ.get("LONGCALL_TOKEN_DIR")
    if configured:
        return Path(configured).expanduser()
    return Path(platformdirs.user_data_dir("longcall")) / "oauth"


def check_url(url: str) -> None:
    """Refuse a URL that is not HTTP(S) or that carries a password (it would be stored)."""
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 - read for its check: a port out of range raises
    except ValueError as exc:  # an unclosed IPv6 bracket, a port past 65535
        raise ConfigError(f"{url!r} is not a usable URL: {exc}") from None
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise ConfigError(f"{url!r} is not an http:// or https:// URL")
    if parts.password is not None or "token=" in parts.query.lower():
        raise ConfigError(
            "the server URL carries a credential; put it in the servers file "
            "(auth.token_env or auth.token_file) so it is never stored"
        )


def load_servers(path: Path) -> ServersConfig:
    """Read a servers file: TOML (``[servers.NAME]``) or MCP-host JSON (``mcpServers``)."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"cannot read the servers file {path}: {exc.strerror}") from exc
    except UnicodeDecodeError as exc:
        raise ConfigError(f"the servers file {path} is not UTF-8 text: {exc.reason}") from exc
    try:
        data = json.loads(text) if path.suffix == ".json" else tomllib.loads(text)
    except (ValueError, tomllib.TOMLDecodeError) as exc:
        raise ConfigError(f"the servers file {path} does not parse: {exc}") from exc
    if not isinstance(data, dict):
        raise ConfigError(f"the servers file {path} is not a table of servers")
    if path.suffix == ".json":
        return _from_host_json(data, path)
    return _from_toml(data, path)


def _from_toml(data: Mapping[str, Any], path: Path) -> ServersConfig:
    table = data.get("servers", {})
    if not isinstance(table, dict):
        raise ConfigError(f"{path}: [servers] must be a table")
    servers = {name: _server(name, entry, path) for name, entry in table.items()}
    return ServersConfig(servers=servers)


def _from_host_json(data: Mapping[str, Any], path: Path) -> ServersConfig:
    table = data.get("mcpServers", data.get("servers", {}))
    if not isinstance(table, dict):
        raise ConfigError(f"{path}: mcpServers must be an object")
    servers: dict[str, ServerConfig] = {}
    skipped: list[str] = []
    for name, entry in table.items():
        if isinstance(entry, dict) and "url" not in entry and "command" in entry:
            skipped.append(f"{name}: starts a local process; longcall calls servers over HTTP")
            continue
        servers[name] = _server(name, entry, path)
    return ServersConfig(servers=servers, skipped=tuple(skipped))


def _server(name: str, entry: Any, path: Path) -> ServerConfig:
    where = f"{path}: server {name!r}"
    if not isinstance(entry, dict):
        raise ConfigError(f"{where} must be a table")
    url = entry.get("url")
    if url is None:
        raise ConfigError(f"{where} has no url")
    if not isinstance(url, str):
        raise ConfigError(f"{where}: url must be a string, not {type(url).__name__}")
    check_url(url)
    headers = entry.get("headers", {})
    if not isinstance(headers, dict) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in headers.items()
    ):
        raise ConfigError(f"{where}: headers must map names to strings")
    auth = entry.get("auth", {})
    if isinstance(auth, str):
        auth = {"type": auth}
    if not isinstance(auth, dict):
        raise ConfigError(f"{where}: auth must be a table")
    kind = auth.get("type", "bearer" if ("token_env" in auth or "token_file" in auth) else "none")
    if kind not in AUTH_TYPES:
        raise ConfigError(f"{where}: auth type {kind!r} is not one of {', '.join(AUTH_TYPES)}")
    takes = {"bearer": _TOKEN_KEYS, "oauth": {"type", *_OAUTH_CLIENT_KEYS}}.get(kind, {"type"})
    unknown = sorted(set(auth) - takes)
    if unknown:
        raise ConfigError(f"{where}: auth of type {kind!r} takes no {', '.join(unknown)}")
    token_env, token_file = auth.get("token_env"), auth.get("token_file")
    if kind == "bearer" and (token_env is None) == (token_file is None):
        raise ConfigError(f"{where}: a bearer token needs exactly one of token_env, token_file")
    oauth_client = _oauth_client(auth, where) if kind == "oauth" else None
    qps = entry.get("poll_qps_max")
    if qps is not None and (not isinstance(qps, int | float) or isinstance(qps, bool) or qps <= 0):
        raise ConfigError(f"{where}: poll_qps_max must be a positive number")
    tools = entry.get("allowed_tools")
    if tools is not None and not (
        isinstance(tools, list) and all(isinstance(t, str) for t in tools)
    ):
        raise ConfigError(f"{where}: allowed_tools must be a list of tool names")
    protocol = entry.get("protocol")
    if protocol is not None and not isinstance(protocol, str):
        raise ConfigError(f"{where}: protocol must be a string")
    webhook_env, webhook_file = _webhook(entry.get("webhook"), where)
    return ServerConfig(
        name=name,
        url=url,
        protocol=protocol,
        headers=dict(headers),
        auth=kind,
        token_env=token_env,
        token_file=token_file,
        poll_qps_max=float(qps) if qps is not None else None,
        allowed_tools=frozenset(tools) if tools is not None else None,
        oauth_client=oauth_client,
        webhook_secret_env=webhook_env,
        webhook_secret_file=webhook_file,
    )


def _webhook(table: Any, where: str) -> tuple[str | None, str | None]:
    """``webhook = { secret_env = "NAME" }`` or ``{ secret_file = "PATH" }``: where the
    server's webhook keys are read (never the key itself in the file)."""
    if table is None:
        return None, None
    if not isinstance(table, dict):
        raise ConfigError(f"{where}: webhook must be a table")
    unknown = sorted(set(table) - {"secret_env", "secret_file"})
    if unknown:
        raise ConfigError(f"{where}: webhook takes no {', '.join(unknown)} (a key is read"
                          " from secret_env or secret_file, never written here)")  # fmt: skip
    env, file = table.get("secret_env"), table.get("secret_file")
    if (env is None) == (file is None):
        raise ConfigError(f"{where}: webhook needs exactly one of secret_env, secret_file")
    for value in (env, file):
        if value is not None and (not isinstance(value, str) or not value.strip()):
            raise ConfigError(f"{where}: webhook.secret_env/secret_file must be a non-empty string")
    return env, file


def _oauth_client(auth: Mapping[str, Any], where: str) -> OAuthClient | None:
    """The registered client an ``oauth`` auth table names (None: register dynamically),
    refusing every combination the flows cannot use."""
    if not set(auth) & _OAUTH_CLIENT_KEYS:
        return None
    strings = {key: auth[key] for key in _OAUTH_CLIENT_KEYS if key in auth}
    for key, value in strings.items():
        if not isinstance(value, str) or not value.strip():
            raise ConfigError(f"{where}: auth.{key} must be a non-empty string")
    if "client_id" not in strings:
        raise ConfigError(f"{where}: an OAuth client needs its client_id")
    grant = strings.get("grant", "authorization_code")
    if grant not in OAUTH_GRANTS:
        raise ConfigError(f"{where}: auth.grant must be one of {', '.join(OAUTH_GRANTS)}")
    if "client_secret_env" in strings and "client_secret_file" in strings:
        raise ConfigError(f"{where}: give one of client_secret_env, client_secret_file")
    if "private_key_env" in strings and "private_key_file" in strings:
        raise ConfigError(f"{where}: give one of private_key_env, private_key_file")
    client = OAuthClient(
        client_id=strings["client_id"],
        grant=grant,
        issuer=strings.get("issuer"),
        scope=strings.get("scope"),
        client_secret_env=strings.get("client_secret_env"),
        client_secret_file=strings.get("client_secret_file"),
        private_key_env=strings.get("private_key_env"),
        private_key_file=strings.get("private_key_file"),
        signing_algorithm=strings.get("signing_algorithm", DEFAULT_SIGNING_ALGORITHM),
        token_endpoint_auth_method=strings.get(
            "token_endpoint_auth_method", SECRET_AUTH_METHODS[0]
        ),
    )
    if client.has_secret and client.has_private_key:
        raise ConfigError(f"{where}: an OAuth client has a secret or a private key, not both")
    if client.has_private_key and grant != "client_credentials":
        raise ConfigError(
            f"{where}: a private key signs client-credentials assertions only"
            ' (grant = "client_credentials")'
        )
    if grant == "client_credentials" and not (client.has_secret or client.has_private_key):
        raise ConfigError(
            f"{where}: the client_credentials grant needs the client's secret"
            " (client_secret_env or client_secret_file) or private key (private_key_env or"
            " private_key_file)"
        )
    if client.token_endpoint_auth_method not in SECRET_AUTH_METHODS:
        raise ConfigError(
            f"{where}: auth.token_endpoint_auth_method must be one of"
            f" {', '.join(SECRET_AUTH_METHODS)}"
        )
    if "token_endpoint_auth_method" in strings and not client.has_secret:
        raise ConfigError(f"{where}: auth.token_endpoint_auth_method applies to a client secret")
    if "signing_algorithm" in strings and not client.has_private_key:
        raise ConfigError(f"{where}: auth.signing_algorithm applies to a private key")
    if client.signing_algorithm not in SIGNING_ALGORITHMS:
        raise ConfigError(
            f"{where}: auth.signing_algorithm must be one of {', '.join(SIGNING_ALGORITHMS)}"
        )
    if client.issuer is not None:
        check_url(client.issuer)
    return client


def _expand(value: str, env: Mapping[str, str], server: str) -> str:
    def replace(match: re.Match[str]) -> str:
        name = match.group(1)
        if name not in env:
            raise MissingCredential(
                f"server {server!r}: a header refers to the environment variable {name}, "
                "which is not set"
            )
        return env[name]

    return ENV_REFERENCE.sub(replace, value)


__all__ = [
    "SERVERS_ENV",
    "ConfigError",
    "MissingCredential",
    "OAuthClient",
    "ServerConfig",
    "ServersConfig",
    "check_url",
    "default_servers_path",
    "load_servers",
]
