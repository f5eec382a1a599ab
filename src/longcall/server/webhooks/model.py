"""The tool side's webhooks, as values: endpoints, deliveries, outcomes, the retry rule,
the address rule (SPEC S7; docs/design/webhooks.md).

Owns: what an endpoint and a delivery are, the payload and the stable event id of one
status change, how an attempt's HTTP status is judged (2xx delivered; 3xx a failure,
never followed; 410 disables; 429/502/504 and ``Retry-After`` throttle the endpoint),
the exponential backoff with full jitter, and which resolved addresses a delivery may
connect to. Must not: do I/O, read a clock or draw a random number (each is passed in).
"""

from __future__ import annotations

import email.utils
import ipaddress
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any
from urllib.parse import urlsplit

from longcall.server.model import TaskRecord, TaskStatus

EVENT_TYPE = "task.status"
EVENT_ID_PREFIX = "evt_"
ENDPOINT_ID_PREFIX = "ep_"
URL_MAX_CHARS = 2_048
KEYS_MAX = 4
"""Keys one endpoint signs with at once (the old and the new while rotating, and spares)."""
ENDPOINTS_PER_PRINCIPAL_MAX = 16
RETRY_AFTER_MAX_S = 24 * 3600.0
"""A ``Retry-After`` longer than a day is taken as a day."""


class DeliveryState(StrEnum):
    """Where one delivery stands."""

    PENDING = "pending"
    """Waiting for its next attempt (``next_attempt_at``)."""
    DELIVERED = "delivered"
    """An attempt got a 2xx."""
    FAILED = "failed"
    """Retried until ``max_attempts`` or ``max_age_s``; only a replay sends it again."""
    DISABLED = "disabled"
    """Its endpoint was disabled (410, or deleted) before it got a 2xx."""


class Outcome(StrEnum):
    """What one attempt came to, as a category: never a response body."""

    DELIVERED = "delivered"
    TIMEOUT = "timeout"
    CONNECTION_REFUSED = "connection_refused"
    CONNECTION_ERROR = "connection_error"
    """Reset, closed early, unreachable network, or an unreadable HTTP answer."""
    DNS_FAILURE = "dns_failure"
    TLS_FAILURE = "tls_failure"
    ADDRESS_REFUSED = "address_refused"
    """The name resolved only to addresses the operator does not allow (private, loopback…)."""
    HTTP_3XX = "http_3xx"
    """A redirect: a failure, never followed (it could point anywhere, a private address too)."""
    HTTP_4XX = "http_4xx"
    HTTP_5XX = "http_5xx"
    THROTTLED = "throttled"
    """429, 502 or 504: the endpoint waits (``Retry-After`` when given) before any delivery."""
    GONE = "gone"
    """410: the receiver says the endpoint is gone; it is disabled."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Endpoint:
    """Where one principal's task status changes are delivered, and how they are signed."""

    endpoint_id: str
    principal: str
    url: str
    keys: tuple[str, ...]
    """``whsec_…`` (v1) and/or ``whsk_…`` (v1a) keys; every one signs each delivery."""
    statuses: frozenset[str] | None
    """The statuses delivered; ``None``: every status change."""
    created_at: float
    disabled_at: float | None = None
    disabled_reason: str | None = None
    throttled_until: float | None = None

    @property
    def enabled(self) -> bool:
        return self.disabled_at is None


@dataclass(frozen=True, slots=True, kw_only=True)
class Delivery:
    """One event for one endpoint, from the durable outbox."""

    delivery_id: int
    endpoint_id: str
    event_id: str
    task_id: str
    status: str
    payload: str
    """The exact JSON text sent (the same bytes at every attempt and replay)."""
    created_at: float
    state: DeliveryState
    attempts: int
    next_attempt_at: float | None
    last_attempt_at: float | None = None
    last_outcome: Outcome | None = None
    last_http_status: int | None = None
    delivered_at: float | None = None
    held_until: float | None = None
    """The lease of the claim this copy was taken under (None: not claimed). An attempt's
    outcome is stored only while that claim stands: a replay or another claimer meanwhile
    makes it a stale copy, whose outcome must not overwrite the newer one's."""


@dataclass(frozen=True, slots=True, kw_only=True)
class RetryPolicy:
    """How long and how often a delivery is retried."""

    base_delay_s: float = 5.0
    max_delay_s: float = 3_600.0
    max_attempts: int = 20
    max_age_s: float = 3 * 24 * 3600.0
    """A delivery older than this is not attempted again (it stays for a replay)."""

    def delay(self, attempts: int, draw: float) -> float:
        """Full jitter: a uniform draw in ``[0, min(cap, base * 2^(attempts - 1))]``.

        ``attempts`` counts the attempts made so far (1 after the first failure); ``draw``
        is a random number in ``[0, 1)`` the caller drew."""
        ceiling = min(self.max_delay_s, self.base_delay_s * math.pow(2, max(0, attempts - 1)))
        return max(0.0, min(1.0, draw)) * ceiling


@dataclass(frozen=True, slots=True, kw_only=True)
class Judgement:
    """What one attempt's answer means for the delivery and its endpoint."""

    outcome: Outcome
    delivered: bool = False
    retry: bool = True
    disable: bool = False
    throttle_s: float | None = None
    """The endpoint takes no attempt for this long (``Retry-After``, or the backoff)."""


def judge(
    http_status: int | None, outcome: Outcome | None = None, *, retry_after: float | None = None
) -> Judgement:
    """An attempt's HTTP status (or its failure category) judged: 2xx delivered; 410
    disables; 429/502/504 throttle the endpoint (``Retry-After`` honoured, capped); every
    other answer, a 3xx included, is a failure retried with backoff."""
    if http_status is None:
        return Judgement(outcome=outcome or Outcome.CONNECTION_ERROR)
    if 200 <= http_status < 300:
        return Judgement(outcome=Outcome.DELIVERED, delivered=True, retry=False)
    if http_status == 410:
        return Judgement(outcome=Outcome.GONE, retry=False, disable=True)
    if http_status in (429, 502, 504):
        return Judgement(outcome=Outcome.THROTTLED, throttle_s=retry_after)
    if 300 <= http_status < 400:
        return Judgement(outcome=Outcome.HTTP_3XX)
    if 400 <= http_status < 500:
        return Judgement(outcome=Outcome.HTTP_4XX, throttle_s=retry_after)
    return Judgement(outcome=Outcome.HTTP_5XX, throttle_s=retry_after)


def parse_retry_after(value: str | None, *, now: float) -> float | None:
    """``Retry-After`` in seconds from ``now`` (delta-seconds or an HTTP date), capped at a
    day; ``None`` when absent or unreadable."""
    if value is None:
        return None
    text = value.strip()
    if text.isascii() and text.isdigit() and len(text) <= 10:
        return min(RETRY_AFTER_MAX_S, float(int(text)))
    try:
        when = email.utils.parsedate_to_datetime(text)
    except (TypeError, ValueError, IndexError):
        return None
    if when.tzinfo is None:
        return None
    return min(RETRY_AFTER_MAX_S, max(0.0, when.timestamp() - now))


# ---- events ----------------------------------------------------------------------------------


def event_id(task_id: str, version: int) -> str:
    """The stable id of one status change: the task and the record version the change
    made. A retry and a replay of it carry the same id, so a receiver deduplicates."""
    return f"{EVENT_ID_PREFIX}{task_id}_{version}"


def payload(record: TaskRecord) -> dict[str, Any]:
    """A status change as a webhook event (Standard Webhooks' ``type``/``timestamp``/
    ``data``; ``data`` in the MCP task status shape). Never a result or an error: the
    caller polls for those, a delivery only tells it when."""
    data: dict[str, Any] = {
        "taskId": record.task_id,
        "status": record.status.value,
        "lastUpdatedAt": _iso(record.last_updated_at),
        "pollIntervalMs": record.poll_interval_ms,
    }
    return {"type": EVENT_TYPE, "timestamp": _iso(record.last_updated_at), "data": data}


def _iso(seconds: float) -> str:
    import datetime

    stamp = datetime.datetime.fromtimestamp(seconds, tz=datetime.UTC)
    return stamp.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def wanted(statuses: frozenset[str] | None, status: TaskStatus) -> bool:
    return statuses is None or status.value in statuses


def statuses_text(statuses: Iterable[str] | None) -> str:
    """The stored form of an endpoint's filter: ``*`` or ``,s1,s2,`` (matched by LIKE)."""
    if statuses is None:
        return "*"
    return "," + ",".join(sorted(set(statuses))) + ","


def statuses_of(text: str) -> frozenset[str] | None:
    return None if text == "*" else frozenset(part for part in text.split(",") if part)


def check_statuses(value: Any) -> frozenset[str] | None:
    """The ``events`` of a registration: statuses, or ``None``/``["*"]`` for all."""
    if value is None:
        return None
    known = {status.value for status in TaskStatus}
    if not isinstance(value, list) or not value or not all(isinstance(v, str) for v in value):
        raise ValueError("events must be a non-empty list of task statuses (or ['*'])")
    if value == ["*"]:
        return None
    unknown = sorted(set(value) - known)
    if unknown:
        raise ValueError(f"unknown task status(es) in events: {', '.join(unknown)}")
    return frozenset(value)


def check_url(url: Any) -> str:
    """An endpoint URL: absolute http(s), a host, no credentials, no fragment."""
    if not isinstance(url, str) or not url or len(url) > URL_MAX_CHARS:
        raise ValueError(f"url must be an http(s) URL of at most {URL_MAX_CHARS} characters")
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError:
        raise ValueError("url is not a valid URL") from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError("url must be an absolute http:// or https:// URL")
    if parts.username is not None or parts.password is not None:
        raise ValueError("url must not hold credentials")
    if parts.fragment:
        raise ValueError("url must not have a fragment")
    if port == 0:
        raise ValueError("url must not name port 0")
    if any(ord(ch) < 0x21 or ord(ch) > 0x7E for ch in url):
        raise ValueError("url must be printable ASCII without spaces (percent-encode the rest)")
    return url


# ---- which addresses a delivery may reach -------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class AddressPolicy:
    """The addresses a delivery may connect to, checked on the resolved address at
    connect time (a name that resolves to 10.0.0.1, or that is rebound to 127.0.0.1
    after registration, is refused at the attempt, whatever it resolved to before).

    By default only globally routable unicast addresses. ``allow_loopback`` (development
    and tests), ``allow_private`` (receivers inside the operator's own network) and
    ``allowed_networks`` (CIDRs) widen it, each an explicit operator choice."""

    allow_loopback: bool = False
    allow_private: bool = False
    allowed_networks: tuple[ipaddress.IPv4Network | ipaddress.IPv6Network, ...] = ()

    @classmethod
    def from_text(
        cls,
        *,
        allow_loopback: bool = False,
        allow_private: bool = False,
        networks: Iterable[str] = (),
    ) -> AddressPolicy:
        return cls(
            allow_loopback=allow_loopback,
            allow_private=allow_private,
            allowed_networks=tuple(ipaddress.ip_network(n, strict=False) for n in networks),
        )

    def allows(self, address: str) -> bool:
        """Whether a resolved address (text, as ``getaddrinfo`` gives it) may be reached."""
        try:
            ip = ipaddress.ip_address(address.split("%", 1)[0])
        except ValueError:
            return False
        if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
            ip = ip.ipv4_mapped  # ::ffff:127.0.0.1 is 127.0.0.1
        if any(ip in network for network in self.allowed_networks):
            return True
        if ip.is_loopback:  # before "reserved": ::1 is in IPv6's reserved ::/8
            return self.allow_loopback
        if ip.is_multicast or ip.is_unspecified or ip.is_reserved:
            return False
        if ip.is_link_local:
            return False  # 169.254.169.254 is a cloud's metadata service: never by a flag
        if ip.is_global:
            return True
        return self.allow_private  # RFC 1918, ULA, shared address space, documentation…


@dataclass(frozen=True, slots=True, kw_only=True)
class WebhookOptions:
    """The operator's webhook settings for one server."""

    addresses: AddressPolicy = field(default_factory=AddressPolicy)
    retry: RetryPolicy = field(default_factory=RetryPolicy)
    attempt_timeout_s: float = 15.0
    """Connect, send and read the answer's head within this, or the attempt is a timeout."""
    max_in_flight: int = 32
    """Attempts under way at once in this process."""
    poll_s: float = 1.0
    """How often the outbox is read for due deliveries (another process's, or retries);
    a change made in this process is sent at once."""
    batch: int = 100
    allow_anonymous: bool = True
    """Whether the ``anonymous`` principal may register endpoints (it already shares its
    tasks with every unauthenticated caller)."""


def endpoint_view(endpoint: Endpoint) -> dict[str, Any]:
    """An endpoint as the registration API shows it: never its keys."""
    view: dict[str, Any] = {
        "id": endpoint.endpoint_id,
        "url": endpoint.url,
        "events": ["*"] if endpoint.statuses is None else sorted(endpoint.statuses),
        "enabled": endpoint.enabled,
        "keyCount": len(endpoint.keys),
    }
    if endpoint.disabled_reason is not None:
        view["disabledReason"] = endpoint.disabled_reason
    return view


def delivery_view(delivery: Delivery) -> dict[str, Any]:
    """A delivery's status as reported: categories and HTTP status codes, never bodies."""
    view: dict[str, Any] = {
        "deliveryId": delivery.delivery_id,
        "endpointId": delivery.endpoint_id,
        "eventId": delivery.event_id,
        "taskId": delivery.task_id,
        "status": delivery.status,
        "state": delivery.state.value,
        "attempts": delivery.attempts,
    }
    optional: Mapping[str, Any] = {
        "lastOutcome": None if delivery.last_outcome is None else delivery.last_outcome.value,
        "lastHttpStatus": delivery.last_http_status,
        "nextAttemptAt": delivery.next_attempt_at,
        "lastAttemptAt": delivery.last_attempt_at,
        "deliveredAt": delivery.delivered_at,
    }
    view.update({key: value for key, value in optional.items() if value is not None})
    return view
