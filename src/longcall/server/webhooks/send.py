"""The webhook sender: one attempt over the wire, and the loop that drains the outbox.

Owns: resolving an endpoint's host, checking every resolved address against the
operator's :class:`AddressPolicy` and connecting *to that checked address* (TLS still
verifies the name), so DNS rebinding cannot slip a private address in between the check
and the connection; one HTTP/1.1 ``POST`` per attempt, signed afresh at the attempt
(Standard Webhooks, :func:`longcall.adapters.webhooks.sign`), within a timeout, whose
answer is read to the end of its head only (a status and ``Retry-After``; the body is
never read, kept or reported); and :class:`WebhookSender`, which claims due deliveries
from the store, sends them, and stores what each attempt came to (backoff with full
jitter, throttling, disabling on 410).
Must not: follow a redirect, report a response body, or touch a task.

Why not httpx: its connection pool resolves names itself at connect time, after any
check we could make; a hand-written request over a socket we opened to the checked
address is the simplest way to make the check the connection's own.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import socket
import ssl
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

from longcall import __version__
from longcall.adapters.webhooks import SigningKey, parse_key, sign
from longcall.errors import InvalidWebhookKey
from longcall.server.errors import StoreUnavailable
from longcall.server.webhooks.model import (
    AddressPolicy,
    Delivery,
    DeliveryState,
    Endpoint,
    Outcome,
    WebhookOptions,
    judge,
    parse_retry_after,
)

if TYPE_CHECKING:
    from longcall.server.store.outbox import OutboxQueries
    from longcall.server.tasks import ChangeHub

logger = logging.getLogger(__name__)

Resolver = Callable[[str, int], Awaitable[list[str]]]
"""A host name and port to the addresses it resolves to (text), or ``socket.gaierror``."""
HEAD_MAX_BYTES = 16 * 1024
"""An answer's status line and headers; anything longer is a connection error."""
LEASE_MARGIN_S = 5.0
"""A claimed delivery stays this process's for its attempt's timeout plus this."""


@dataclass(frozen=True, slots=True, kw_only=True)
class AttemptResult:
    """What one attempt came to: a category and, if an answer came, its HTTP status."""

    outcome: Outcome | None
    """``None`` when an answer came (``http_status`` says what it was)."""
    http_status: int | None = None
    retry_after: str | None = None
    address: str | None = None
    """The address connected to (or refused), for the log."""


async def system_resolver(host: str, port: int) -> list[str]:
    """The addresses ``host`` resolves to now, as the system resolver answers."""
    infos = await asyncio.get_running_loop().getaddrinfo(host, port, type=socket.SOCK_STREAM)
    return list(dict.fromkeys(str(info[4][0]) for info in infos))


async def attempt(
    url: str,
    headers: dict[str, str],
    body: bytes,
    *,
    policy: AddressPolicy,
    timeout_s: float,
    resolve: Resolver = system_resolver,
    tls: ssl.SSLContext | None = None,
) -> AttemptResult:
    """One ``POST`` of ``body`` to ``url``: resolve, check, connect to a checked address,
    send, read the answer's head. Never raises for a network failure: it is the result."""
    parts = urlsplit(url)
    host = parts.hostname or ""
    https = parts.scheme == "https"
    port = parts.port or (443 if https else 80)
    target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    try:
        async with asyncio.timeout(timeout_s):
            try:
                addresses = await resolve(host, port)
            except (OSError, UnicodeError):
                return AttemptResult(outcome=Outcome.DNS_FAILURE)
            allowed = [address for address in addresses if policy.allows(address)]
            if not allowed:
                shown = addresses[0] if addresses else None
                return AttemptResult(outcome=Outcome.ADDRESS_REFUSED, address=shown)
            last = AttemptResult(outcome=Outcome.CONNECTION_ERROR)
            for address in allowed:
                try:
                    reader, writer = await asyncio.open_connection(
                        address,
                        port,
                        ssl=(tls or ssl.create_default_context()) if https else None,
                        server_hostname=host if https else None,
                    )
                except ConnectionRefusedError:
                    last = AttemptResult(outcome=Outcome.CONNECTION_REFUSED, address=address)
                    continue
                except ssl.SSLError:
                    return AttemptResult(outcome=Outcome.TLS_FAILURE, address=address)
                except OSError:
                    last = AttemptResult(outcome=Outcome.CONNECTION_ERROR, address=address)
                    continue
                try:
                    return await _exchange(
                        reader, writer, parts.netloc, target, headers, body, address
                    )
                finally:
                    writer.close()
                    with contextlib.suppress(Exception):
                        await writer.wait_closed()
            return last
    except TimeoutError:
        return AttemptResult(outcome=Outcome.TIMEOUT)


async def _exchange(
    reader: asyncio.StreamReader,
    writer: asyncio.StreamWriter,
    authority: str,
    target: str,
    headers: dict[str, str],
    body: bytes,
    address: str,
) -> AttemptResult:
    lines = [
        f"POST {target} HTTP/1.1",
        f"Host: {authority}",
        f"User-Agent: longcall/{__version__}",
        "Content-Type: application/json",
        f"Content-Length: {len(body)}",
        "Connection: close",
        *(f"{name}: {value}" for name, value in headers.items()),
    ]
    try:
        writer.write(("\r\n".join(lines) + "\r\n\r\n").encode("ascii") + body)
        await writer.drain()
        head = await reader.readuntil(b"\r\n\r\n")
    except ssl.SSLError:
        return AttemptResult(outcome=Outcome.TLS_FAILURE, address=address)
    except ConnectionRefusedError:
        return AttemptResult(outcome=Outcome.CONNECTION_REFUSED, address=address)
    except (OSError, asyncio.IncompleteReadError, asyncio.LimitOverrunError):
        return AttemptResult(outcome=Outcome.CONNECTION_ERROR, address=address)
    if len(head) > HEAD_MAX_BYTES:
        return AttemptResult(outcome=Outcome.CONNECTION_ERROR, address=address)
    status_line, *header_lines = head.decode("latin-1").split("\r\n")
    version, _, rest = status_line.partition(" ")
    code = rest[:3]
    if not version.startswith("HTTP/1.") or not (code.isascii() and code.isdigit()):
        return AttemptResult(outcome=Outcome.CONNECTION_ERROR, address=address)
    retry_after = None
    for line in header_lines:
        name, _, value = line.partition(":")
        if name.strip().lower() == "retry-after":
            retry_after = value.strip()
    return AttemptResult(
        outcome=None, http_status=int(code), retry_after=retry_after, address=address
    )


def signing_keys(texts: Sequence[str]) -> list[SigningKey]:
    """An endpoint's stored keys as signing keys (a public key cannot sign: refused)."""
    keys: list[SigningKey] = []
    for text in texts:
        key = parse_key(text)
        if not hasattr(key, "sign"):
            raise InvalidWebhookKey("a whpk_ key only verifies; an endpoint needs whsec_ or whsk_")
        keys.append(key)  # type: ignore[arg-type]
    return keys


@dataclass(frozen=True, slots=True, kw_only=True)
class Attempted:
    """One attempt as the sender saw it (for tests and logs)."""

    delivery: Delivery
    endpoint: Endpoint
    outcome: Outcome
    http_status: int | None
    state: DeliveryState
    next_attempt_at: float | None
    at: float


class WebhookSender:
    """Drains the outbox: claims due deliveries, sends each (signed at the attempt), and
    stores the outcome. A change made in this process is sent at once (the change hub
    nudges it); others' changes and retries are found by reading the outbox every
    ``options.poll_s`` or when the earliest retry is due, whichever is first."""

    def __init__(
        self,
        store: OutboxQueries,
        options: WebhookOptions,
        *,
        owner: str,
        clock: Callable[[], float],
        hub: ChangeHub | None = None,
        draw: Callable[[], float] = random.random,
        resolve: Resolver = system_resolver,
        tls: ssl.SSLContext | None = None,
        on_attempt: Callable[[Attempted], None] | None = None,
    ) -> None:
        self.store = store
        self.options = options
        self.owner = owner
        self.clock = clock
        self.hub = hub
        self.draw = draw
        self.resolve = resolve
        self.tls = tls
        self.on_attempt = on_attempt
        self._wake = asyncio.Event()
        self._slots = asyncio.Semaphore(options.max_in_flight)
        self._in_flight: set[asyncio.Task[None]] = set()

    def nudge(self) -> None:
        """Read the outbox now (a change was stored, a replay was asked for)."""
        self._wake.set()

    async def run(self) -> None:
        """Send until cancelled; attempts under way are cancelled with it (their
        deliveries stay pending and are claimed again once their lease runs out)."""
        listening = None
        if self.hub is not None:
            listening = asyncio.get_running_loop().create_task(self._listen(self.hub))
        try:
            while True:
                self._wake.clear()
                try:
                    wait_s = await self._pass()
                except StoreUnavailable as exc:
                    logger.warning("webhook outbox unavailable: %s", exc)
                    wait_s = self.options.poll_s
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(wait_s):
                        await self._wake.wait()
        finally:
            if listening is not None:
                listening.cancel()
            for task in list(self._in_flight):
                task.cancel()
            if self._in_flight:
                await asyncio.gather(*self._in_flight, return_exceptions=True)

    async def _listen(self, hub: ChangeHub) -> None:
        with hub.listen(None) as listener:
            while True:
                await listener.get()
                self._wake.set()

    async def _pass(self) -> float:
        """Claim and start what is due, and say how long to wait before the next pass.

        The outbox is read before it is written: a change with no delivery due (most of
        the hub's nudges) costs one read, not a claiming transaction. A delivery under
        way stays pending (and due) until its attempt is stored, so a due time that has
        passed while nothing more could be claimed means only attempts under way (ours,
        or another process's lease): the next pass waits for a nudge (an attempt
        stored, a change) or ``poll_s``, instead of claiming nothing again at once."""
        due = await self.store.next_delivery_due(self.clock())
        if due is None:
            return self.options.poll_s
        if due > self.clock():
            return min(self.options.poll_s, due - self.clock())
        asked, claimed = await self._round()
        return 0.0 if asked and claimed >= asked else self.options.poll_s

    async def _round(self) -> tuple[int, int]:
        """Claim up to the free attempt slots and start each: (asked, claimed)."""
        free = self.options.max_in_flight - len(self._in_flight)
        if free <= 0:
            return 0, 0  # a finished attempt nudges the next pass
        now = self.clock()
        until = now + self.options.attempt_timeout_s + LEASE_MARGIN_S
        limit = min(free, self.options.batch)
        claimed = await self.store.claim_deliveries(self.owner, now=now, until=until, limit=limit)
        for delivery, endpoint in claimed:
            task = asyncio.get_running_loop().create_task(self._send(delivery, endpoint))
            self._in_flight.add(task)
            task.add_done_callback(self._done)
        return limit, len(claimed)

    def _done(self, task: asyncio.Task[None]) -> None:
        self._in_flight.discard(task)
        if not task.cancelled() and task.exception() is not None:
            logger.error("webhook attempt failed", exc_info=task.exception())
        self._wake.set()  # a slot is free

    async def _send(self, delivery: Delivery, endpoint: Endpoint) -> None:
        async with self._slots:
            body = delivery.payload.encode()
            try:
                keys = signing_keys(endpoint.keys)
                headers = sign(
                    keys, msg_id=delivery.event_id, timestamp=int(self.clock()), body=body
                )
            except InvalidWebhookKey as exc:  # pragma: no cover - checked at registration
                logger.error("endpoint %s has an unusable key: %s", endpoint.endpoint_id, exc)
                return
            result = await attempt(
                endpoint.url,
                headers,
                body,
                policy=self.options.addresses,
                timeout_s=self.options.attempt_timeout_s,
                resolve=self.resolve,
                tls=self.tls,
            )
            await self._record(delivery, endpoint, result)

    async def _record(self, delivery: Delivery, endpoint: Endpoint, result: AttemptResult) -> None:
        now = self.clock()
        retry_after = parse_retry_after(result.retry_after, now=now)
        verdict = judge(result.http_status, result.outcome, retry_after=retry_after)
        attempts = delivery.attempts + 1
        retry = self.options.retry
        next_at: float | None = None
        throttled_until = None
        disable_reason = None
        if verdict.delivered:
            state = DeliveryState.DELIVERED
        elif verdict.disable:
            state = DeliveryState.DISABLED
            disable_reason = f"the receiver answered {result.http_status} (gone)"
        elif attempts >= retry.max_attempts or now - delivery.created_at >= retry.max_age_s:
            state = DeliveryState.FAILED
        else:
            state = DeliveryState.PENDING
            backoff = retry.delay(attempts, self.draw())
            next_at = now + max(backoff, verdict.throttle_s or 0.0)
            if verdict.outcome is Outcome.THROTTLED:
                # The whole endpoint waits: its other deliveries would meet the same answer.
                throttled_until = now + (
                    verdict.throttle_s if verdict.throttle_s is not None else backoff
                )
        if state is not DeliveryState.DELIVERED:
            logger.info(
                "webhook %s to endpoint %s: %s%s (attempt %d)",
                delivery.event_id,
                endpoint.endpoint_id,
                verdict.outcome.value,
                "" if result.http_status is None else f" {result.http_status}",
                attempts,
            )
        stored = await self._retrying(
            lambda: self.store.record_attempt(
                delivery,
                owner=self.owner,
                now=now,
                outcome=verdict.outcome,
                http_status=result.http_status,
                state=state,
                next_attempt_at=next_at,
                disable_reason=disable_reason,
                throttled_until=throttled_until,
            )
        )
        if stored and self.on_attempt is not None:
            self.on_attempt(
                Attempted(
                    delivery=delivery,
                    endpoint=endpoint,
                    outcome=verdict.outcome,
                    http_status=result.http_status,
                    state=state,
                    next_attempt_at=next_at,
                    at=now,
                )
            )

    async def _retrying(self, write: Callable[[], Awaitable[bool]]) -> bool:
        delay = 0.05
        for _ in range(8):
            try:
                return await write()
            except StoreUnavailable as exc:
                logger.warning("could not store a webhook attempt (%s); retrying", exc)
                await asyncio.sleep(delay)
                delay = min(2.0, delay * 2)
        return False  # the lease runs out and the delivery is attempted again
