"""The console's web application: who may ask, the pages, and the operator's actions.

Owns: :class:`Console` (the ledger client, the token, the action log) and its ASGI
app. The guard in front of every request checks the Host (a DNS-rebinding page
cannot reach the console), the token (``?token=`` once, then an HttpOnly SameSite
cookie) and, for every write, the Origin (another site's form is refused even with
the cookie or token); every answer carries a strict Content-Security-Policy. An action
is a POST carrying what its form was drawn from (the row version for a
reconciliation, the state and cancel generation for a cancel, the state and input
round for an answer) and an action id this console issued: a row changed in those is
refused, and the write goes to the client with the very version just checked, so one
that loses a race is refused too, never retried onto a row the operator did not see
(compare-and-set); a repeated id does nothing twice, and the write itself is the
client's command, the one ``longcall ops answer|cancel|reconcile`` runs. Must not:
write the ledger any other way, fake a protocol outcome, or put a credential (token,
password) into a page.
"""

from __future__ import annotations

import asyncio
import collections
import dataclasses
import hashlib
import hmac
import json
import secrets
import socket
import time
from collections.abc import Awaitable, Callable, Iterable
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, urlencode

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import HTMLResponse, PlainTextResponse, RedirectResponse, Response
from starlette.routing import Route
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from longcall.client import Client
from longcall.console import pages
from longcall.console.html import node_url
from longcall.core import OperationRecord, State, UnknownCallNode
from longcall.errors import ConsolePortUnavailable, LongcallError, VersionConflict
from longcall.ledger import Ledger
from longcall.runtime.listen import listening_socket

STATIC = Path(__file__).parent / "static"
WILDCARDS = frozenset({"0.0.0.0", "::", "[::]", ""})
"""Bind addresses meaning every interface: no browser sends one as its Host."""
CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self';"
    " connect-src 'self'; form-action 'self'; base-uri 'none'; frame-ancestors 'none'"
)
SECURITY_HEADERS = {
    "content-security-policy": CSP,
    "x-content-type-options": "nosniff",
    "x-frame-options": "DENY",
    # same-origin, not no-referrer: under no-referrer a browser sends "Origin: null" on
    # the console's own form posts, which the Origin check could not tell from a
    # sandboxed attacker frame.
    "referrer-policy": "same-origin",
    "cache-control": "no-store",
    "cross-origin-opener-policy": "same-origin",
    "cross-origin-resource-policy": "same-origin",
}
ACTION_LOG_SIZE = 2_000
FORM_BYTES_MAX = 256 * 1024


SECRET_OPTIONS = frozenset({"password", "sslpassword", "passfile", "sslkey"})
"""libpq options a ledger URL may carry that are, or point at, a secret."""


def shown_ledger(ledger_url: str) -> str:
    """The ledger URL as a page may show it: no password, in the address or among its
    options (``?schema=`` and the like are kept: a CLI line needs them)."""
    text, _, query = ledger_url.split("#", 1)[0].partition("?")
    kept = [(k, v) for k, v in parse_qsl(query, keep_blank_values=True)
            if k.lower() not in SECRET_OPTIONS]  # fmt: skip
    scheme, sep, rest = text.partition("://")
    if sep:
        authority, slash, path = rest.partition("/")
        if "@" in authority:
            user, host = authority.rsplit("@", 1)
            authority = f"{user.split(':', 1)[0]}@{host}"
        text = f"{scheme}://{authority}{slash}{path}"
    return text + (f"?{urlencode(kept)}" if kept else "")


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class ActionOutcome:
    """What one action did: shown after the redirect, and again for a repeated id."""

    node: str
    ok: bool
    message: str
    cli: str


class Console:
    """One console over one ledger: ``app`` serves it; ``url`` is the address to open."""

    def __init__(
        self,
        ledger_url: str,
        *,
        host: str,
        port: int,
        token: str | None = None,
        allowed_hosts: Iterable[str] = (),
    ) -> None:
        self.ledger_url = ledger_url
        # Names a browser elsewhere uses to reach a console bound beyond loopback (its
        # Host header); a wildcard bind address is never one.
        self.allowed_hosts = tuple(h.lower() for h in allowed_hosts)
        self.client = Client(ledger_url, create_ledger=False)
        self.ledger: Ledger = self.client.ledger  # opened now: a wrong URL fails at start
        self.host = host
        self.port = port
        self.token = token or secrets.token_urlsafe(32)
        self._key = hashlib.sha256(b"longcall-console:" + self.token.encode()).digest()
        self.session = hmac.new(self._key, b"session", "sha256").hexdigest()
        self.cookie = f"longcall_console_{port}"
        self.actions: collections.OrderedDict[str, ActionOutcome] = collections.OrderedDict()
        self._acting = asyncio.Lock()
        self.app: ASGIApp = Guard(self._routes(), self)

    @property
    def url(self) -> str:
        if self.host in WILDCARDS:
            host = self.allowed_hosts[0] if self.allowed_hosts else "127.0.0.1"
        else:
            host = self.host
        return f"http://{_bracketed(host)}:{self.port}/?token={self.token}"

    @property
    def origins(self) -> frozenset[str]:
        """Every ``host:port`` this console answers at (the Host and Origin it accepts)."""
        hosts = {"127.0.0.1", "localhost", "[::1]", *self.allowed_hosts}
        if self.host not in WILDCARDS:
            hosts.add(self.host.lower())
        return frozenset(f"{_bracketed(h)}:{self.port}" for h in hosts)

    def close(self) -> None:
        self.client.close()

    # --- the action ids -------------------------------------------------------------

    def new_action(self) -> str:
        """A fresh action id, signed so only this console's forms carry one."""
        nonce = secrets.token_urlsafe(12)
        return f"{nonce}.{self._sign(nonce)}"

    def _sign(self, nonce: str) -> str:
        return hmac.new(self._key, nonce.encode(), "sha256").hexdigest()[:24]

    def issued(self, action_id: str) -> bool:
        nonce, _, signature = action_id.partition(".")
        return bool(nonce) and hmac.compare_digest(signature, self._sign(nonce))

    # --- pages ------------------------------------------------------------------------

    def _view(self, request: Request) -> pages.View:
        flash = None
        done = request.query_params.get("action")
        if done and done in self.actions:
            outcome = self.actions[done]
            flash = pages.flash(outcome.ok, outcome.message, outcome.cli)
        return pages.View(
            ledger_shown=shown_ledger(self.ledger_url),
            cli_ledger=f" --ledger {pages.quoted(shown_ledger(self.ledger_url))}",
            new_action=self.new_action,
            now=time.time(),
            flash=flash,
        )

    def _routes(self) -> Starlette:
        def page(build: Callable[[Request, pages.View], str]) -> Callable[[Request], Response]:
            def endpoint(request: Request) -> Response:
                try:
                    return HTMLResponse(build(request, self._view(request)))
                except UnknownCallNode as exc:
                    return HTMLResponse(pages.refused("Not found", str(exc)), status_code=404)
                except ValueError as exc:
                    return HTMLResponse(pages.refused("Bad request", str(exc)), status_code=400)

            return endpoint

        def result_page(request: Request) -> int:
            try:
                return int(request.query_params.get("page", "1"))
            except ValueError:
                return 1

        routes = [
            Route("/", page(lambda r, v: pages.home(self.ledger, v))),
            Route(
                "/operations",
                page(
                    lambda r, v: pages.operations(self.ledger, v, pages.Filters.of(r.query_params))
                ),
            ),
            Route(
                "/op/{node:path}",
                page(
                    lambda r, v: pages.operation(
                        self.ledger, v, r.path_params["node"], result_page=result_page(r)
                    )
                ),
            ),
            Route("/inbox", page(lambda r, v: pages.inbox(self.ledger, v))),
            Route("/reconcile", page(lambda r, v: pages.reconcile(self.ledger, v))),
            Route("/servers", page(lambda r, v: pages.servers(self.ledger, v))),
            Route("/static/{name}", static),
            Route("/act/answer", self._act(self._answer), methods=["POST"]),
            Route("/act/cancel", self._act(self._cancel), methods=["POST"]),
            Route("/act/reconcile", self._act(self._reconcile), methods=["POST"]),
        ]
        return Starlette(routes=routes)

    # --- actions ----------------------------------------------------------------------

    def _act(
        self, run: Callable[[dict[str, str]], Awaitable[ActionOutcome]]
    ) -> Callable[[Request], Awaitable[Response]]:
        async def endpoint(request: Request) -> Response:
            body = await request.body()
            if len(body) > FORM_BYTES_MAX:
                return PlainTextResponse("the form is too large", status_code=413)
            form = dict(parse_qsl(body.decode("utf-8", "replace"), keep_blank_values=True))
            action_id = form.get("action_id", "")
            if not self.issued(action_id):
                return HTMLResponse(
                    pages.refused("Refused", "this form was not issued by this console"),
                    status_code=403,
                )
            # One action at a time: a double click's second POST waits for the first,
            # then finds its id done and changes nothing.
            async with self._acting:
                outcome = self.actions.get(action_id)
                if outcome is None:
                    outcome = await self._checked(run, form)
                    self.actions[action_id] = outcome
                    while len(self.actions) > ACTION_LOG_SIZE:
                        self.actions.popitem(last=False)
            target = node_url(outcome.node) if outcome.node else "/"
            return RedirectResponse(f"{target}?{urlencode({'action': action_id})}", status_code=303)

        return endpoint

    async def _checked(
        self, run: Callable[[dict[str, str]], Awaitable[ActionOutcome]], form: dict[str, str]
    ) -> ActionOutcome:
        node = form.get("node", "")
        try:
            return await run(form)
        except VersionConflict as exc:
            return ActionOutcome(
                node=node, ok=False, cli="",
                message=f"{node} changed since this page was drawn: {exc}; look again",
            )  # fmt: skip
        except LongcallError as exc:
            return ActionOutcome(node=node, ok=False, message=str(exc), cli="")

    async def _fresh(self, node: str, form: dict[str, str], *fields: str) -> OperationRecord:
        """The row now, refused (VersionConflict) unless ``fields`` still read as the form
        drew them: the write then goes against this very version, never a newer one."""
        record = await asyncio.to_thread(self.ledger.get, node)
        for name in fields:
            now = _form_value(record, name)
            if now != form.get(name, ""):
                raise VersionConflict(
                    f"its {name.replace('_', ' ')} was {form.get(name, '')!r} on the page,"
                    f" it is {now!r} now (state {record.state.value})"
                )
        return record

    def _cli(self, line: str) -> str:
        return f"{line} --ledger {pages.quoted(shown_ledger(self.ledger_url))}"

    async def _answer(self, form: dict[str, str]) -> ActionOutcome:
        node, key = form["node"], form.get("key", "")
        # The round, not the raw version: a worker polling the waiting operation commits
        # new versions all the time, and none of them changes the question.
        record = await self._fresh(node, form, "state", "input_round")
        at = record.version
        q = pages.quoted
        if form.get("decline"):
            await self.client.answer(node, {key: {"action": "decline"}}, expected_version=at)
            line = f"longcall ops answer {q(node)} --key {q(key)} --decline"
        elif "answer_json" in form:
            body = _json(form["answer_json"])
            await self.client.answer(node, {key: body}, expected_version=at)
            line = f"longcall ops answer {q(node)} --key {q(key)} --json {q(form['answer_json'])}"
        else:
            fields = {
                name.removeprefix("field."): value
                for name, value in form.items()
                if name.startswith("field.") and value != ""
            }
            await self.client.answer(node, fields=fields, key=key, expected_version=at)
            pairs = " ".join(f"{k}={q(v)}" for k, v in fields.items())
            line = f"longcall ops answer {q(node)} --key {q(key)} {pairs}".rstrip()
        return ActionOutcome(
            node=node, ok=True, cli=self._cli(line),
            message=f"answer stored for round {record.input_round}; a running worker sends it",
        )  # fmt: skip

    async def _cancel(self, form: dict[str, str]) -> ActionOutcome:
        node = form["node"]
        # State and cancel generation, not the raw version: every poll of a running
        # operation commits a new version, and none of them changes what Cancel means.
        record = await self._fresh(node, form, "state", "cancel_generation")
        outcome = await self.client.cancel(node, expected_version=record.version)
        detail = f" — {outcome.detail}" if outcome.detail else ""
        return ActionOutcome(
            node=node,
            ok=outcome.outcome != "not_cancellable",
            message=f"{outcome.outcome} (generation {outcome.cancel_generation}){detail}",
            cli=self._cli(f"longcall ops cancel {pages.quoted(node)}"),
        )

    async def _reconcile(self, form: dict[str, str]) -> ActionOutcome:
        node = form["node"]
        # A row waiting for an operator is not polled: the exact version drawn must hold.
        record = await self._fresh(node, form, "version")
        resolution = form.get("resolution", "")
        note, actor = form.get("note", "").strip(), form.get("actor", "").strip()
        if not note or not actor:
            why = "a reconciliation records who and why: give both"
            return ActionOutcome(node=node, ok=False, cli="", message=why)
        raw = form.get("result_json", "").strip()
        result = _json(raw) if raw else None
        after = await self.client.reconcile(
            node, resolution, note=note, actor=actor, result=result,
            expected_version=record.version,
        )  # fmt: skip
        q = pages.quoted
        line = (
            f"longcall ops reconcile {q(node)} --as {q(resolution)} --note {q(note)}"
            f" --actor {q(actor)}"
        )
        if raw:
            line += f" --result {q(raw)}"
        return ActionOutcome(
            node=node, ok=True, cli=self._cli(line),
            message=f"{after.state.value} (by {actor}: {note})",
        )  # fmt: skip


def _form_value(record: OperationRecord, name: str) -> str:
    """The record's field as a form carries it (text)."""
    value = getattr(record, name)
    return str(value.value if isinstance(value, State) else value)


def _json(text: str) -> Any:
    from longcall.errors import InvalidArguments

    try:
        return json.loads(text)
    except ValueError as exc:
        raise InvalidArguments(f"not JSON: {exc}") from None


def static(request: Request) -> Response:
    name = request.path_params["name"]
    types = {"console.js": "text/javascript", "console.css": "text/css"}
    if name not in types:
        return PlainTextResponse("not found", status_code=404)
    return Response((STATIC / name).read_bytes(), media_type=types[name])


class Guard:
    """Host, token and Origin checks in front of the app, and the security headers."""

    def __init__(self, app: ASGIApp, console: Console) -> None:
        self.app = app
        self.console = console

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            if scope["type"] == "lifespan":
                await self.app(scope, receive, send)
            return
        response = self._refusal(Request(scope))
        if response is not None:
            await response(scope, receive, _with_headers(send))
            return
        await self.app(scope, receive, _with_headers(send))

    def _refusal(self, request: Request) -> Response | None:
        console = self.console
        host = request.headers.get("host", "").lower()
        if host not in console.origins:
            return _refused(421, "Wrong host", "this console answers only at its own address")
        token = request.query_params.get("token")
        if token is not None:
            if not hmac.compare_digest(token.encode(), console.token.encode()):
                return _refused(403, "Wrong token", "open the address the console printed")
            # The token leaves the address bar (and history, and any Referer) at once.
            kept = [(k, v) for k, v in request.query_params.multi_items() if k != "token"]
            target = request.url.path + (f"?{urlencode(kept)}" if kept else "")
            response = RedirectResponse(target, status_code=303)
            response.set_cookie(
                console.cookie, console.session, httponly=True, samesite="strict", path="/"
            )
            return response
        cookie = request.cookies.get(console.cookie, "")
        if not hmac.compare_digest(cookie.encode(), console.session.encode()):
            return _refused(
                403, "Token needed", "open the address with ?token= that the console printed"
            )
        if request.method not in ("GET", "HEAD", "POST"):
            return _refused(405, "Not allowed", "only GET and POST")
        if request.method == "POST" and not _same_origin(request, host):
            return _refused(
                403, "Cross-site request refused", "writes come only from this console's pages"
            )
        return None


def _bracketed(host: str) -> str:
    return f"[{host}]" if ":" in host and not host.startswith("[") else host


def _same_origin(request: Request, host: str) -> bool:
    origin = request.headers.get("origin")
    if origin is not None and origin != "null":
        return origin == f"http://{host}"
    # No Origin, or an opaque one: only the browser's own word that the request comes
    # from this origin is believed (a page cannot set Sec-Fetch-Site).
    return request.headers.get("sec-fetch-site") == "same-origin"


def _refused(status: int, title: str, message: str) -> Response:
    return HTMLResponse(pages.refused(title, message), status_code=status)


def _with_headers(send: Send) -> Send:
    async def sending(message: Message) -> None:
        if message["type"] == "http.response.start":
            headers = list(message.get("headers", []))
            present = {name.lower() for name, _ in headers}
            for name, value in SECURITY_HEADERS.items():
                if name.encode() not in present:
                    headers.append((name.encode(), value.encode()))
            message = {**message, "headers": headers}
        await send(message)

    return sending


def open_console(
    ledger_url: str,
    *,
    host: str = "127.0.0.1",
    port: int = 0,
    allowed_hosts: Iterable[str] = (),
) -> tuple[Console, socket.socket]:
    """A console on a listening socket of ``host`` (``port`` 0: a free one): connections
    queue from now on, so its URL can be handed out before serving starts. It answers
    at loopback names, ``host`` (unless a wildcard) and ``allowed_hosts``."""
    try:
        sock = listening_socket(host, port)
    except OSError as exc:
        raise ConsolePortUnavailable(
            f"cannot listen on {host}:{port}: {exc.strerror or exc}"
        ) from None
    try:
        console = Console(
            ledger_url, host=host, port=sock.getsockname()[1], allowed_hosts=allowed_hosts
        )
        return console, sock
    except BaseException:
        sock.close()
        raise


async def serve(console: Console, sock: socket.socket) -> None:
    """Serve ``console`` on ``sock`` until cancelled (or a signal stops uvicorn)."""
    import uvicorn

    from longcall.runtime.stopping import StoppingServer

    config = uvicorn.Config(console.app, log_level="warning", lifespan="off", access_log=False)
    try:
        await StoppingServer(config).serve(sockets=[sock])
    finally:
        sock.close()
        console.close()


__all__ = ["Console", "open_console", "serve", "shown_ledger"]
