"""Who is calling: request headers to a principal (S5).

Owns: the ``Authenticator`` contract and three implementations — every bearer token is
its own principal (the default; no token means ``anonymous``), a static token ->
subject table that rejects unknown tokens, and :class:`BearerAuth`, which asks an
authorization server's verifier (the ``mcp`` SDK's ``TokenVerifier`` shape) and serves
RFC 9728 protected-resource metadata. Must not: store tokens (only a digest
names a token principal, so the task store never holds a credential; cf. the wire
reference §6.3 W12).
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from longcall.server.model import ANONYMOUS, Principal

Authenticator = Callable[[Mapping[str, str]], Principal | Awaitable[Principal | None] | None]
"""Lower-cased request headers -> the principal, or ``None`` to answer HTTP 401 (may be async)."""

WELL_KNOWN_RESOURCE = "/.well-known/oauth-protected-resource"


def bearer_token(headers: Mapping[str, str]) -> str | None:
    """The bearer token of an ``Authorization`` header, if any."""
    value = headers.get("authorization")
    if value is None:
        return None
    scheme, _, token = value.partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        return None
    return token.strip()


def token_principal(headers: Mapping[str, str]) -> Principal | None:
    """Default: a bearer token is its own principal (by digest); no header is ``anonymous``."""
    if "authorization" not in headers:
        return ANONYMOUS
    token = bearer_token(headers)
    if token is None:
        return None
    digest = hashlib.sha256(token.encode()).hexdigest()[:32]
    return Principal(subject=f"token:{digest}")


class StaticTokens:
    """A fixed token -> subject table (tests, small deployments); unknown tokens get 401."""

    def __init__(
        self, subjects_by_token: Mapping[str, str], *, allow_anonymous: bool = False
    ) -> None:
        self._subjects = dict(subjects_by_token)
        self._allow_anonymous = allow_anonymous

    def __call__(self, headers: Mapping[str, str]) -> Principal | None:
        token = bearer_token(headers)
        if token is None:
            return ANONYMOUS if self._allow_anonymous and "authorization" not in headers else None
        subject = self._subjects.get(token)
        return None if subject is None else Principal(subject=subject)


class BearerAuth:
    """Bearer tokens checked by an authorization server's verifier, with RFC 9728 metadata.

    ``verifier`` is anything with the official ``mcp`` SDK's ``TokenVerifier`` shape
    (``async verify_token(token) -> AccessToken | None``), so a verifier written for an
    SDK server (JWT, introspection) works unchanged. A token is accepted when the verifier
    returns an access token that has not expired, carries every required scope and, when
    it names one, was issued for this resource (RFC 8707). The principal is the token's
    (issuer, client, subject), never the token itself. The protected-resource metadata
    (RFC 9728) is served at ``/.well-known/oauth-protected-resource<resource path>`` and
    named in every 401's ``WWW-Authenticate``.
    """

    def __init__(
        self,
        verifier: Any,
        *,
        resource_server_url: str,
        authorization_servers: Sequence[str],
        required_scopes: Sequence[str] = (),
        resource_name: str | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        if not authorization_servers:
            raise ValueError("name at least one authorization server (RFC 9728)")
        self._verifier = verifier
        self.resource_server_url = resource_server_url
        self._authorization_servers = list(authorization_servers)
        self._required_scopes = set(required_scopes)
        self._resource_name = resource_name
        self._clock = clock
        parts = urlsplit(resource_server_url)
        self.metadata_path = f"{WELL_KNOWN_RESOURCE}{parts.path.rstrip('/')}"
        self.metadata_url = urlunsplit((parts.scheme, parts.netloc, self.metadata_path, "", ""))

    async def __call__(self, headers: Mapping[str, str]) -> Principal | None:
        token = bearer_token(headers)
        if token is None:
            return None
        access = await self._verifier.verify_token(token)
        if access is None:
            return None
        if access.expires_at is not None and access.expires_at < self._clock():
            return None
        if not self._required_scopes <= set(access.scopes or ()):
            return None
        if access.resource is not None and access.resource.rstrip("/") != (
            self.resource_server_url.rstrip("/")
        ):
            return None  # issued for another resource (RFC 8707 audience)
        issuer = (access.claims or {}).get("iss")
        parts = [str(issuer or ""), access.client_id, access.subject or ""]
        return Principal(subject="oauth:" + "|".join(parts))

    def metadata(self) -> dict[str, Any]:
        """The RFC 9728 protected-resource metadata document."""
        document: dict[str, Any] = {
            "resource": self.resource_server_url,
            "authorization_servers": self._authorization_servers,
            "bearer_methods_supported": ["header"],
        }
        if self._required_scopes:
            document["scopes_supported"] = sorted(self._required_scopes)
        if self._resource_name is not None:
            document["resource_name"] = self._resource_name
        return document
