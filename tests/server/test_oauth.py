"""Behind an authorization server: an SDK-shaped token verifier and RFC 9728 metadata."""

from __future__ import annotations

import time

import httpx
import pytest
from mcp.server.auth.provider import AccessToken, TokenVerifier
from mcp.shared.auth import ProtectedResourceMetadata

from conftest import ModernClient
from longcall.server import BearerAuth, build_reference_server, running_server

pytestmark = pytest.mark.anyio

AUTHORIZATION_SERVER = "https://auth.example.org"


class TableVerifier:
    """A ``TokenVerifier`` over a fixed table (what an introspection endpoint would answer)."""

    def __init__(self, resource: str) -> None:
        now = int(time.time())
        self.tokens = {
            "t-alice": AccessToken(
                token="t-alice",
                client_id="app",
                scopes=["tasks"],
                expires_at=now + 600,
                resource=resource,
                subject="alice",
                claims={"iss": AUTHORIZATION_SERVER},
            ),
            "t-alice-again": AccessToken(
                token="t-alice-again",
                client_id="app",
                scopes=["tasks", "other"],
                subject="alice",
                claims={"iss": AUTHORIZATION_SERVER},
            ),
            "t-expired": AccessToken(
                token="t-expired", client_id="app", scopes=["tasks"], expires_at=now - 1
            ),
            "t-no-scope": AccessToken(token="t-no-scope", client_id="app", scopes=[]),
            "t-elsewhere": AccessToken(
                token="t-elsewhere",
                client_id="app",
                scopes=["tasks"],
                resource="https://other.example.org/mcp",
            ),
        }

    async def verify_token(self, token: str) -> AccessToken | None:
        return self.tokens.get(token)


async def test_tokens_from_a_verifier_and_protected_resource_metadata(
    http: httpx.AsyncClient, store_path: str
) -> None:
    """401 names the metadata; only valid, in-scope, this-resource tokens pass; the principal
    is the token's subject, so another token of the same subject sees the same tasks."""
    resource = "http://127.0.0.1/mcp"
    verifier: TokenVerifier = TableVerifier(resource)  # the SDK's protocol, statically
    auth = BearerAuth(
        verifier,
        resource_server_url=resource,
        authorization_servers=[AUTHORIZATION_SERVER],
        required_scopes=["tasks"],
    )
    server = build_reference_server(store=store_path, authenticator=auth)
    async with running_server(server) as url:
        base = url.removesuffix("/mcp")
        anonymous = await ModernClient(http, url).post("server/discover")
        assert anonymous.status_code == 401
        challenge = anonymous.headers["www-authenticate"]
        assert challenge.startswith("Bearer ")
        assert 'resource_metadata="http://127.0.0.1/.well-known/oauth-protected-resource/mcp"' in (
            challenge
        )
        document = (await http.get(f"{base}/.well-known/oauth-protected-resource/mcp")).json()
        metadata = ProtectedResourceMetadata.model_validate(document)
        assert str(metadata.resource) == resource
        assert [str(item).rstrip("/") for item in metadata.authorization_servers] == [
            AUTHORIZATION_SERVER
        ]
        for token in ("t-unknown", "t-expired", "t-no-scope", "t-elsewhere"):
            refused = await ModernClient(http, url, token=token).post("server/discover")
            assert refused.status_code == 401, token
        v1 = await http.get(f"{base}/v1/operations", headers={"authorization": "Bearer t-expired"})
        assert v1.status_code == 401
        alice = ModernClient(http, url, token="t-alice")
        task = await alice.create("crawl", {"pages": 0, "items_per_page": 0})
        again = ModernClient(http, url, token="t-alice-again")
        assert (await again.get(task["taskId"]))["taskId"] == task["taskId"]
        record = await server.store.get(task["taskId"])
    assert record is not None
    assert record.principal == f"oauth:{AUTHORIZATION_SERVER}|app|alice"
    assert "t-alice" not in record.principal
