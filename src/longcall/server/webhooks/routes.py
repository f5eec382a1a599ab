"""The webhook HTTP API of a tool server, and the service that runs its sender.

Owns: ``/webhooks/endpoints`` (a principal registers, lists and deletes its endpoints),
``/webhooks/deliveries`` (their delivery status: categories and HTTP status codes,
never a response body) and ``/webhooks/endpoints/{id}/replay`` (send one delivery or
a range again, each signed afresh), all behind the same front door as ``/mcp`` (origin,
authentication to a principal, body cap, strict JSON); and :class:`WebhookService`,
which mounts them and runs the :class:`~longcall.server.webhooks.send.WebhookSender`
for the server's lifespan. Must not: send anything itself, or show a key after the
registration that made it.

Every endpoint belongs to the principal that registered it: another principal's
endpoint is "not found", and an endpoint receives the status changes of its own
principal's tasks only — the binding every task already has (S5).
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import logging
import secrets
from collections.abc import Callable
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from longcall.adapters.webhooks import (
    Ed25519SigningKey,
    ed25519_key_from_seed,
    new_hmac_key,
    parse_key,
)
from longcall.errors import InvalidWebhookKey
from longcall.server.errors import QuotaExceeded, Refused, StoreUnavailable
from longcall.server.front import admit, parse_json, read_body
from longcall.server.model import ANONYMOUS, Principal
from longcall.server.webhooks.model import (
    ENDPOINTS_PER_PRINCIPAL_MAX,
    KEYS_MAX,
    WebhookOptions,
    check_statuses,
    check_url,
    delivery_view,
    endpoint_view,
)
from longcall.server.webhooks.send import Attempted, Resolver, WebhookSender, system_resolver

if TYPE_CHECKING:
    from longcall.server.app import LongcallServer
    from longcall.server.store.outbox import OutboxQueries

logger = logging.getLogger(__name__)

PREFIX = "/webhooks"
LIST_LIMIT_MAX = 500
REPLAY_RANGE_MAX = 1_000


class ApiFailure(Exception):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


def _failure(status: int, message: str, headers: dict[str, str] | None = None) -> JSONResponse:
    return JSONResponse({"error": {"status": status, "message": message}}, status_code=status,
                        headers=headers)  # fmt: skip


class WebhookService:
    """The webhook API and sender of one :class:`LongcallServer`."""

    def __init__(
        self,
        server: LongcallServer,
        options: WebhookOptions,
        *,
        resolve: Resolver = system_resolver,
        draw: Callable[[], float] | None = None,
        on_attempt: Callable[[Attempted], None] | None = None,
    ) -> None:
        store = server.store
        if not hasattr(store, "claim_deliveries"):
            raise TypeError("webhooks need a task store with an outbox (SQLite or PostgreSQL)")
        self.server = server
        self.options = options
        self.store: OutboxQueries = store  # type: ignore[assignment]
        extra: dict[str, Any] = {} if draw is None else {"draw": draw}
        self.sender = WebhookSender(
            self.store,
            options,
            owner=server.manager.owner,
            clock=server.manager.clock,
            hub=server.manager.hub,
            resolve=resolve,
            on_attempt=on_attempt,
            **extra,
        )
        self._running: asyncio.Task[None] | None = None

    def routes(self) -> list[Route]:
        return [Route(PREFIX + "/{rest:path}", self.endpoint, methods=["GET", "POST", "DELETE"])]

    async def start(self) -> None:
        self._running = asyncio.get_running_loop().create_task(
            self.sender.run(), name="longcall-webhook-sender"
        )

    async def stop(self) -> None:
        if self._running is not None:
            self._running.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._running
            self._running = None

    # ---- the API ---------------------------------------------------------------------------

    async def endpoint(self, request: Request) -> Response:
        try:
            admitted = await admit(request, self.server.options, self.server.authenticate)
            return await self._route(request, admitted.principal)
        except Refused as exc:
            self.server.metrics.observe_refused(exc.reason)
            return _failure(exc.status, exc.message, exc.headers)
        except ApiFailure as exc:
            return _failure(exc.status, exc.message)
        except StoreUnavailable as exc:
            return _failure(503, f"task store unavailable: {exc}", {"retry-after": "1"})
        except Exception:
            logger.exception("internal error on %s %s", request.method, request.url.path)
            return _failure(500, "internal error")

    async def _route(self, request: Request, principal: Principal) -> Response:
        rest: str = request.path_params["rest"]
        method = request.method
        if rest == "endpoints" and method == "POST":
            return await self._register(request, principal)
        if rest == "endpoints" and method == "GET":
            endpoints = await self.store.list_endpoints(principal.subject)
            return JSONResponse({"endpoints": [endpoint_view(e) for e in endpoints]})
        if rest == "deliveries" and method == "GET":
            return await self._deliveries(request, principal)
        if rest.startswith("endpoints/"):
            endpoint_id, _, verb = rest[len("endpoints/") :].partition("/")
            if method == "DELETE" and not verb:
                if not await self.store.delete_endpoint(principal.subject, endpoint_id):
                    raise ApiFailure(404, "no such endpoint")
                return Response(status_code=204)
            if method == "GET" and not verb:
                return JSONResponse(endpoint_view(await self._own(principal, endpoint_id)))
            if method == "POST" and verb == "replay":
                return await self._replay(request, principal, endpoint_id)
        raise ApiFailure(404, f"no method {method} {PREFIX}/{rest}")

    async def _own(self, principal: Principal, endpoint_id: str) -> Any:
        endpoint = await self.store.get_endpoint(endpoint_id)
        if endpoint is None or endpoint.principal != principal.subject:
            raise ApiFailure(404, "no such endpoint")
        return endpoint

    async def _body(self, request: Request) -> dict[str, Any]:
        options = self.server.options
        raw = await read_body(request, options)
        if not raw.strip():
            return {}
        if not request.headers.get("content-type", "").lower().startswith("application/json"):
            raise ApiFailure(415, "Content-Type must be application/json")
        try:
            body = parse_json(raw, max_depth=options.max_json_depth)
        except Exception:
            raise ApiFailure(400, "the body is not valid JSON") from None
        if not isinstance(body, dict):
            raise ApiFailure(400, "the body must be a JSON object")
        return body

    async def _register(self, request: Request, principal: Principal) -> Response:
        if principal == ANONYMOUS and not self.options.allow_anonymous:
            raise ApiFailure(401, "registering a webhook endpoint needs an authenticated caller")
        body = await self._body(request)
        try:
            url = check_url(body.get("url"))
            statuses = check_statuses(body.get("events"))
        except ValueError as exc:
            raise ApiFailure(400, str(exc)) from None
        self._refuse_literal_address(url)
        keys, shown = self._keys(body)
        try:
            endpoint = await self.store.register_endpoint(
                principal=principal.subject,
                url=url,
                keys=keys,
                statuses=statuses,
                now=self.server.manager.clock(),
                max_per_principal=ENDPOINTS_PER_PRINCIPAL_MAX,
            )
        except QuotaExceeded as exc:
            raise ApiFailure(409, str(exc)) from None
        return JSONResponse({**endpoint_view(endpoint), **shown}, status_code=201)

    def _refuse_literal_address(self, url: str) -> None:
        """An IP literal the sender would refuse is refused now (names are checked at
        each attempt, on what they resolve to then)."""
        host = urlsplit(url).hostname or ""
        try:
            ipaddress.ip_address(host)
        except ValueError:
            return
        if not self.options.addresses.allows(host):
            raise ApiFailure(
                400,
                f"{host} is a private, loopback, link-local or reserved address; this"
                " server delivers only to addresses its operator allows",
            )

    def _keys(self, body: dict[str, Any]) -> tuple[list[str], dict[str, Any]]:
        """The endpoint's signing keys, and what the answer may show of them: a key the
        server made (shown once, here), and the public half of every ed25519 key."""
        given = body.get("secret", body.get("secrets"))
        scheme = body.get("scheme", "v1")
        if scheme not in ("v1", "v1a"):
            raise ApiFailure(400, "scheme must be v1 (HMAC) or v1a (ed25519)")
        shown: dict[str, Any] = {}
        if given is None:
            seed = secrets.token_bytes(32)
            made = new_hmac_key(seed) if scheme == "v1" else ed25519_key_from_seed(seed)
            texts = [made.encoded()]
            if scheme == "v1":
                shown["secret"] = texts[0]
        else:
            texts = [given] if isinstance(given, str) else given
            if not isinstance(texts, list) or not texts or len(texts) > KEYS_MAX:
                raise ApiFailure(400, f"secret must be a key or a list of 1 to {KEYS_MAX} keys")
        public = []
        for text in texts:
            if not isinstance(text, str):
                raise ApiFailure(400, "each secret must be a string")
            try:
                key = parse_key(text)
            except InvalidWebhookKey as exc:
                raise ApiFailure(400, str(exc)) from None
            if key.version == "v1a" and not isinstance(key, Ed25519SigningKey):
                raise ApiFailure(400, "a whpk_ key only verifies: give the whsk_ key to sign")
            if isinstance(key, Ed25519SigningKey):
                public.append(key.public_key().encoded())
        if public:
            shown["publicKeys"] = public
        return [text.strip() for text in texts], shown

    async def _deliveries(self, request: Request, principal: Principal) -> Response:
        query = request.query_params
        try:
            limit = min(LIST_LIMIT_MAX, int(query.get("limit", "100")))
            after = int(query["after"]) if "after" in query else None
        except ValueError:
            raise ApiFailure(400, "limit and after must be integers") from None
        deliveries = await self.store.list_deliveries(
            principal.subject,
            endpoint_id=query.get("endpoint"),
            task_id=query.get("task"),
            after=after,
            limit=max(1, limit),
        )
        return JSONResponse({"deliveries": [delivery_view(d) for d in deliveries]})

    async def _replay(self, request: Request, principal: Principal, endpoint_id: str) -> Response:
        endpoint = await self._own(principal, endpoint_id)
        if not endpoint.enabled:
            raise ApiFailure(409, "the endpoint is disabled; register its URL again first")
        body = await self._body(request)
        one = body.get("deliveryId")
        first, last = (one, one) if one is not None else (body.get("from"), body.get("to"))
        if not all(isinstance(n, int) and not isinstance(n, bool) for n in (first, last)):
            raise ApiFailure(400, "give deliveryId, or from and to (delivery ids, inclusive)")
        assert isinstance(first, int)
        assert isinstance(last, int)
        if last < first or last - first >= REPLAY_RANGE_MAX:
            raise ApiFailure(400, f"a range is from <= to, at most {REPLAY_RANGE_MAX} ids")
        replayed = await self.store.replay_deliveries(
            principal.subject, endpoint_id, first=first, last=last, now=self.server.manager.clock()
        )
        self.sender.nudge()
        return JSONResponse({"replayed": replayed}, status_code=202)
