"""Who is calling: request headers to a principal (S5).

Owns: the ``Authenticator`` contract and two implementations — every bearer token is
its own principal (the default; no token means ``anonymous``), and a static token ->
subject table that rejects unknown tokens. Must not: store tokens (only a digest
names a token principal, so the task store never holds a credential; cf. the wire
reference §6.3 W12).
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Mapping

from longcall.server.model import ANONYMOUS, Principal

Authenticator = Callable[[Mapping[str, str]], Principal | None]
"""Lower-cased request headers -> the principal, or ``None`` to answer HTTP 401."""


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
