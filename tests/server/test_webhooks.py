"""Signed webhooks from the tool side (S7): endpoints per principal, the durable outbox,
the sender's rules (backoff with full jitter, throttling, 410, no redirects, the address
rule at connect time), delivery status, replay — over real HTTP on 127.0.0.1, waiting on
events (the receiver's requests, the sender's attempts), never on a fixed time."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import itertools
import json
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from standardwebhooks import Webhook
from svix.webhooks import Webhook as SvixWebhook
from tests.bounds import LOADED_MACHINE_S
from tests.webhook_peer import HookReceiver, Received, free_port

from conftest import ModernClient
from longcall.adapters.webhooks import Verifier, parse_key, parse_keys
from longcall.server import LongcallServer, running_server
from longcall.server.model import NewTask, ProtocolVersion
from longcall.server.states import Cause
from longcall.server.store import open_store
from longcall.server.webhooks import (
    AddressPolicy,
    DeliveryState,
    Outcome,
    RetryPolicy,
    WebhookOptions,
)
from longcall.server.webhooks.model import event_id, judge, parse_retry_after
from longcall.server.webhooks.send import Attempted, Resolver

pytestmark = pytest.mark.anyio

FAST = WebhookOptions(
    addresses=AddressPolicy(allow_loopback=True),
    retry=RetryPolicy(base_delay_s=0.05, max_delay_s=0.2, max_attempts=50),
    attempt_timeout_s=5.0,
    poll_s=0.2,
)


# ---- the rules, as values ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("status", "outcome", "delivered", "retry", "disable"),
    [
        (200, Outcome.DELIVERED, True, False, False),
        (204, Outcome.DELIVERED, True, False, False),
        (301, Outcome.HTTP_3XX, False, True, False),
        (307, Outcome.HTTP_3XX, False, True, False),
        (400, Outcome.HTTP_4XX, False, True, False),
        (409, Outcome.HTTP_4XX, False, True, False),
        (410, Outcome.GONE, False, False, True),
        (429, Outcome.THROTTLED, False, True, False),
        (500, Outcome.HTTP_5XX, False, True, False),
        (502, Outcome.THROTTLED, False, True, False),
        (503, Outcome.HTTP_5XX, False, True, False),
        (504, Outcome.THROTTLED, False, True, False),
    ],
)
def test_each_answer_is_judged_by_its_status(
    status: int, outcome: Outcome, delivered: bool, retry: bool, disable: bool
) -> None:
    """2xx delivered; a 3xx is a failure (never followed); 410 disables; 429/502/504 throttle."""
    verdict = judge(status)
    assert (verdict.outcome, verdict.delivered, verdict.retry, verdict.disable) == (
        outcome,
        delivered,
        retry,
        disable,
    )


def test_backoff_is_exponential_with_full_jitter() -> None:
    """The delay is a uniform draw under min(cap, base * 2^(n-1)): 0 at draw 0, the
    ceiling at draw 1, the ceiling doubling up to the cap."""
    policy = RetryPolicy(base_delay_s=1.0, max_delay_s=60.0)
    assert [policy.delay(n, 1.0) for n in range(1, 9)] == [1, 2, 4, 8, 16, 32, 60, 60]
    assert all(policy.delay(n, 0.0) == 0.0 for n in range(1, 9))
    assert policy.delay(3, 0.5) == 2.0


def test_retry_after_is_read_as_seconds_or_a_date() -> None:
    now = 1_700_000_000.0
    assert parse_retry_after("7", now=now) == 7.0
    assert parse_retry_after("Tue, 14 Nov 2023 22:13:40 GMT", now=now) == 20.0
    assert parse_retry_after("99999999999", now=now) is None  # not delta-seconds we read
    assert parse_retry_after("9999999", now=now) == 24 * 3600.0
    assert parse_retry_after("soon", now=now) is None
    assert parse_retry_after(None, now=now) is None


@pytest.mark.parametrize(
    ("address", "default", "loopback", "private"),
    [
        ("93.184.216.34", True, True, True),
        ("2606:4700::1111", True, True, True),
        ("127.0.0.1", False, True, False),
        ("127.8.9.10", False, True, False),
        ("::1", False, True, False),
        ("::ffff:127.0.0.1", False, True, False),
        ("10.1.2.3", False, False, True),
        ("172.16.0.1", False, False, True),
        ("192.168.1.1", False, False, True),
        ("100.64.0.1", False, False, True),
        ("fd00::1", False, False, True),
        ("::ffff:10.0.0.1", False, False, True),
        ("169.254.169.254", False, False, False),
        ("fe80::1", False, False, False),
        ("0.0.0.0", False, False, False),
        ("224.0.0.1", False, False, False),
        ("240.0.0.1", False, False, False),
        ("not an address", False, False, False),
    ],
)
def test_the_address_rule(address: str, default: bool, loopback: bool, private: bool) -> None:
    """Only global unicast by default; loopback and private only by the operator's
    explicit allow; link-local (a cloud's metadata service) never by a flag."""
    assert AddressPolicy().allows(address) is default
    assert AddressPolicy(allow_loopback=True).allows(address) is (default or loopback)
    assert AddressPolicy(allow_private=True).allows(address) is (default or private)
    assert AddressPolicy.from_text(networks=["169.254.0.0/16"]).allows("169.254.1.1")


# ---- the outbox in the store (both backends) -----------------------------------------------


def new_task(task_id: str, principal: str = "p", created_at: float | None = None) -> NewTask:
    return NewTask(
        task_id=task_id,
        principal=principal,
        tool_name="tool",
        arguments={},
        arguments_digest="d",
        protocol=ProtocolVersion.MODERN,
        submission_key=None,
        created_at=time.time() if created_at is None else created_at,
        ttl_ms=3_600_000,
        poll_interval_ms=100,
    )


async def test_each_status_change_is_enqueued_with_the_change(store_url: str) -> None:
    """Every status change of the principal's tasks gets one delivery per endpoint, in the
    change's own transaction, with a stable event id; other principals' tasks none; an
    endpoint's events filter holds; a change that is not a status change (a claim) none."""
    store = open_store(store_url)
    try:
        now = time.time()
        every = await store.register_endpoint(
            principal="p", url="https://a.example/hook", keys=["whsec_" + "A" * 32],
            statuses=None, now=now, max_per_principal=4,
        )  # fmt: skip
        ends = await store.register_endpoint(
            principal="p", url="https://b.example/hook", keys=["whsec_" + "B" * 32],
            statuses=frozenset({"completed"}), now=now, max_per_principal=4,
        )  # fmt: skip
        await store.create(new_task("t1"), owner="a", lease_until=now + 10)
        await store.create(new_task("t2", principal="q"), owner="a", lease_until=now + 10)
        await store.transition("t1", Cause.INPUT_REQUESTED, now=now)
        await store.transition("t1", Cause.INPUT_ANSWERED, now=now)
        await store.transition("t1", Cause.TOOL_RETURNED, now=now, result={"ok": 1})
        assert await store.transition("t1", Cause.TOOL_FAILED, now=now) is None
        listed = await store.list_deliveries("p")
        by_endpoint = {
            e.endpoint_id: [
                (d.status, d.event_id) for d in listed if d.endpoint_id == e.endpoint_id
            ]
            for e in (every, ends)
        }
        record = await store.get("t1")
        assert record is not None
        assert by_endpoint[every.endpoint_id] == [
            ("working", event_id("t1", 1)),
            ("input_required", event_id("t1", 2)),
            ("working", event_id("t1", 3)),
            ("completed", event_id("t1", record.version)),
        ]
        assert by_endpoint[ends.endpoint_id] == [("completed", event_id("t1", record.version))]
        assert await store.list_deliveries("q") == []
        body = json.loads(listed[-1].payload)
        assert body == {
            "type": "task.status",
            "timestamp": body["timestamp"],
            "data": {
                "taskId": "t1",
                "status": "completed",
                "lastUpdatedAt": body["timestamp"],
                "pollIntervalMs": 100,
            },
        }
        assert "result" not in listed[-1].payload  # a delivery never carries the outcome
        # Another principal cannot delete the endpoint; its owner can, deliveries with it.
        assert not await store.delete_endpoint("q", every.endpoint_id)
        assert await store.delete_endpoint("p", every.endpoint_id)
        assert {d.endpoint_id for d in await store.list_deliveries("p")} == {ends.endpoint_id}
    finally:
        store.close()


async def test_claims_attempts_and_replays_in_the_store(store_url: str) -> None:
    """A claimed delivery is nobody else's until its lease ends; a failed attempt waits
    for its next time; a replay makes a delivered one pending again, attempts anew."""
    store = open_store(store_url)
    try:
        now = time.time()
        endpoint = await store.register_endpoint(
            principal="p", url="https://a.example/hook", keys=["whsec_" + "A" * 32],
            statuses=None, now=now, max_per_principal=4,
        )  # fmt: skip
        await store.create(new_task("t1", created_at=now), owner="a", lease_until=now + 10)
        [(delivery, _)] = await store.claim_deliveries("s1", now=now, until=now + 20, limit=10)
        assert await store.claim_deliveries("s2", now=now + 1, until=now + 21, limit=10) == []
        assert await store.record_attempt(
            delivery, owner="s1", now=now + 1, outcome=Outcome.CONNECTION_REFUSED,
            http_status=None, state=DeliveryState.PENDING, next_attempt_at=now + 5,
        )  # fmt: skip
        assert await store.claim_deliveries("s2", now=now + 2, until=now + 22, limit=10) == []
        assert await store.next_delivery_due(now + 2) == now + 5
        [(again, _)] = await store.claim_deliveries("s2", now=now + 5, until=now + 25, limit=10)
        assert again.attempts == 1
        assert again.last_outcome is Outcome.CONNECTION_REFUSED
        assert not await store.record_attempt(  # s1 no longer holds it
            again, owner="s1", now=now + 6, outcome=Outcome.DELIVERED, http_status=200,
            state=DeliveryState.DELIVERED, next_attempt_at=None,
        )  # fmt: skip
        assert await store.record_attempt(
            again, owner="s2", now=now + 6, outcome=Outcome.DELIVERED, http_status=200,
            state=DeliveryState.DELIVERED, next_attempt_at=None,
        )  # fmt: skip
        assert await store.next_delivery_due(now + 6) is None
        replayed = await store.replay_deliveries(
            "p", endpoint.endpoint_id, first=delivery.delivery_id, last=delivery.delivery_id,
            now=now + 7,
        )  # fmt: skip
        assert replayed == [delivery.delivery_id]
        assert (
            await store.replay_deliveries("q", endpoint.endpoint_id, first=0, last=99, now=now + 7)
            == []
        )
        [(third, _)] = await store.claim_deliveries("s3", now=now + 7, until=now + 27, limit=10)
        assert (third.state, third.attempts, third.event_id) == (
            DeliveryState.PENDING,
            0,
            delivery.event_id,
        )
    finally:
        store.close()


async def test_an_attempt_overtaken_by_a_replay_keeps_the_replays_outcome(store_url: str) -> None:
    """A replay while an attempt is in flight makes the delivery pending again; claimed
    again by the same sender, only the newer claim's outcome is stored, and the old
    attempt's report is refused whatever it says."""
    store = open_store(store_url)
    try:
        now = time.time()
        endpoint = await store.register_endpoint(
            principal="p", url="https://a.example/hook", keys=["whsec_" + "A" * 32],
            statuses=None, now=now, max_per_principal=4,
        )  # fmt: skip
        await store.create(new_task("t1", created_at=now), owner="a", lease_until=now + 10)
        [(sent, _)] = await store.claim_deliveries("s1", now=now, until=now + 20, limit=10)
        first, last = sent.delivery_id, sent.delivery_id
        replay = store.replay_deliveries
        assert await replay("p", endpoint.endpoint_id, first=first, last=last, now=now + 1)
        [(again, _)] = await store.claim_deliveries("s1", now=now + 1, until=now + 21, limit=10)
        assert not await store.record_attempt(  # the attempt sent before the replay
            sent, owner="s1", now=now + 2, outcome=Outcome.DELIVERED, http_status=200,
            state=DeliveryState.DELIVERED, next_attempt_at=None,
        )  # fmt: skip
        assert await store.record_attempt(
            again, owner="s1", now=now + 3, outcome=Outcome.HTTP_5XX, http_status=503,
            state=DeliveryState.PENDING, next_attempt_at=now + 8,
        )  # fmt: skip
        assert await store.next_delivery_due(now + 3) == now + 8
    finally:
        store.close()


# ---- the sender over real HTTP ---------------------------------------------------------------


class Attempts:
    """The sender's attempts, waited on as events."""

    def __init__(self) -> None:
        self.seen: list[Attempted] = []
        self._changed = asyncio.Condition()

    def __call__(self, attempted: Attempted) -> None:
        self.seen.append(attempted)
        asyncio.get_running_loop().create_task(self._notify())

    async def _notify(self) -> None:
        async with self._changed:
            self._changed.notify_all()

    async def wait_for(self, predicate: Callable[[list[Attempted]], bool]) -> list[Attempted]:
        async with asyncio.timeout(LOADED_MACHINE_S), self._changed:
            await self._changed.wait_for(lambda: predicate(self.seen))
        return list(self.seen)


@dataclass
class HookServer:
    server: LongcallServer
    base: str
    http: httpx.AsyncClient
    mcp: ModernClient
    attempts: Attempts

    async def register(self, url: str, token: str | None = None, **body: Any) -> httpx.Response:
        headers = {} if token is None else {"authorization": f"Bearer {token}"}
        return await self.http.post(
            self.base + "/webhooks/endpoints", json={"url": url, **body}, headers=headers
        )

    async def endpoint(self, url: str, **body: Any) -> dict[str, Any]:
        answer = await self.register(url, **body)
        assert answer.status_code == 201, answer.text
        return dict(answer.json())

    async def run_task(self, tool: str = "quick") -> str:
        created = await self.mcp.create(tool, {})
        return str(created["task"]["taskId"]) if "task" in created else str(created["taskId"])

    async def deliveries(self, token: str | None = None, **query: str) -> list[dict[str, Any]]:
        headers = {} if token is None else {"authorization": f"Bearer {token}"}
        answer = await self.http.get(
            self.base + "/webhooks/deliveries", params=query, headers=headers
        )
        assert answer.status_code == 200, answer.text
        return list(answer.json()["deliveries"])


@contextlib.asynccontextmanager
async def hooked(
    tmp_path: Path, options: WebhookOptions = FAST, *, resolve: Resolver | None = None
) -> AsyncIterator[HookServer]:
    """A running server with one quick task tool, sending webhooks with ``options`` (and
    ``resolve`` as its sender's resolver), every attempt recorded."""
    server = LongcallServer(store=f"sqlite:///{tmp_path / 'tasks.db'}", webhooks=options)

    @server.tool(task="required", poll_interval_ms=100)
    async def quick() -> dict[str, Any]:
        """Return at once."""
        return {"ok": True}

    attempts = Attempts()
    assert server.webhooks is not None
    server.webhooks.sender.on_attempt = attempts
    if resolve is not None:
        server.webhooks.sender.resolve = resolve
    async with running_server(server) as url, httpx.AsyncClient(timeout=60) as http:
        yield HookServer(
            server=server,
            base=url.removesuffix("/mcp"),
            http=http,
            mcp=ModernClient(http, url),
            attempts=attempts,
        )


@pytest.fixture
async def hook_server(tmp_path: Path) -> AsyncIterator[HookServer]:
    async with hooked(tmp_path) as world:
        yield world


def ids_of(requests: list[Received]) -> list[str]:
    return [r.msg_id for r in requests]


async def test_deliveries_verify_with_the_reference_library_and_svix(
    hook_server: HookServer,
) -> None:
    """Each status change arrives signed: standardwebhooks 1.1.0 and svix 2.9.1 verify v1
    deliveries; longcall's verifier holding only the whpk_ public key
    verifies v1a ones; a delivery names the task and its status, nothing more."""
    async with HookReceiver() as v1, HookReceiver(path="/ed25519") as v1a:
        made = await hook_server.endpoint(v1.url)
        ed = await hook_server.endpoint(v1a.url, scheme="v1a")
        assert "secret" not in ed
        task_id = await hook_server.run_task()
        await v1.wait_for(lambda got: len(got) == 2)
        await v1a.wait_for(lambda got: len(got) == 2)
        # Deliveries may arrive in either order (docs/design/webhooks.md): both came.
        assert sorted(ids_of(v1.requests)) == [event_id(task_id, 1), event_id(task_id, 2)]
        assert sorted(ids_of(v1.requests)) == sorted(ids_of(v1a.requests))
    reference = Webhook(made["secret"])
    statuses = []
    for request in sorted(v1.requests, key=lambda received: received.msg_id):
        assert request.headers["webhook-signature"].startswith("v1,")
        statuses.append(reference.verify(request.body, request.headers)["data"]["status"])
    assert statuses == ["working", "completed"]
    for request in v1.requests:
        SvixWebhook(made["secret"]).verify(request.body, request.headers)
    [public] = ed["publicKeys"]
    verifier = Verifier(parse_keys(public))
    for request in v1a.requests:
        assert request.headers["webhook-signature"].startswith("v1a,")
        verifier.verify(request.headers, request.body, now=time.time())


async def test_rotation_signs_with_old_and_new_keys(hook_server: HookServer) -> None:
    """Re-registering a URL with [old, new] signs with both: a receiver holding either
    verifies; then [new] alone (no failed verification at any point)."""
    old, new = (
        "whsec_" + "MTIzNDU2Nzg5MDEyMzQ1Njc4OTAxMjM0",
        "whsec_" + "YWJjZGVmZ2hpamtsbW5vcHFyc3R1dnd4",
    )
    async with HookReceiver() as hooks:
        await hook_server.endpoint(hooks.url, secret=old)
        await hook_server.run_task()
        await hooks.wait_for(lambda got: len(got) == 2)
        await hook_server.endpoint(hooks.url, secret=[old, new])
        await hook_server.run_task()
        await hooks.wait_for(lambda got: len(got) == 4)
        await hook_server.endpoint(hooks.url, secret=new)
        await hook_server.run_task()
        await hooks.wait_for(lambda got: len(got) == 6)
    for index, request in enumerate(hooks.requests):
        holders = [old] if index < 2 else [old, new] if index < 4 else [new]
        for holder in holders:
            Webhook(holder).verify(request.body, request.headers)


async def test_receiver_down_then_back_every_event_arrives_once_after_backoff(
    hook_server: HookServer,
) -> None:
    """Connection refused, then 503s, then up: each event is attempted again with backoff
    and, once the receiver answers 2xx, arrives exactly once; nothing is lost."""
    port = free_port()
    down = HookReceiver(port=port)
    await hook_server.endpoint(down.url)
    for _ in range(3):
        await hook_server.run_task()
    refused = await hook_server.attempts.wait_for(
        lambda seen: sum(a.outcome is Outcome.CONNECTION_REFUSED for a in seen) >= 12
    )
    assert all(a.state is DeliveryState.PENDING for a in refused)
    # Then the receiver comes up, answering 503 to its first four requests.
    down.answer = lambda n, _h, _b: (503, {}) if n <= 4 else (204, {})
    async with down as hooks:
        await hook_server.attempts.wait_for(
            lambda seen: sum(a.state is DeliveryState.DELIVERED for a in seen) == 6
        )
    expected = sorted(d["eventId"] for d in await hook_server.deliveries())
    assert len(set(expected)) == 6  # working and completed of each task
    assert sorted(ids_of(hooks.accepted())) == expected  # each once
    seen = hook_server.attempts.seen
    for attempted in seen:
        if attempted.state is DeliveryState.PENDING:
            assert attempted.next_attempt_at is not None
            ceiling = FAST.retry.delay(attempted.delivery.attempts + 1, 1.0)
            assert attempted.at <= attempted.next_attempt_at <= attempted.at + ceiling + 1e-6
    # The same delivery's attempts never came earlier than the time its backoff set.
    by_delivery: dict[int, list[Attempted]] = {}
    for attempted in seen:
        by_delivery.setdefault(attempted.delivery.delivery_id, []).append(attempted)
    for chain in by_delivery.values():
        for before, after in itertools.pairwise(chain):
            assert before.next_attempt_at is not None
            assert after.at >= before.next_attempt_at
    listed = await hook_server.deliveries()
    assert {d["state"] for d in listed} == {"delivered"}
    assert {d["lastOutcome"] for d in listed} == {"delivered"}
    assert max(d["attempts"] for d in listed) >= 3


async def test_410_disables_the_endpoint(hook_server: HookServer) -> None:
    """A 410 disables the endpoint: its pending deliveries stop, later changes are not
    enqueued for it, until its URL is registered again."""
    async with HookReceiver(lambda _n, _h, _b: (410, {})) as gone:
        made = await hook_server.endpoint(gone.url, events=["completed"])
        await hook_server.run_task()
        await hook_server.attempts.wait_for(lambda seen: len(seen) >= 1)
        listed = await hook_server.http.get(hook_server.base + "/webhooks/endpoints")
        [view] = listed.json()["endpoints"]
        assert view["enabled"] is False
        assert "410" in view["disabledReason"]
        await hook_server.run_task()
        deliveries = await hook_server.deliveries(endpoint=made["id"])
        assert len(deliveries) == 1  # the first task's; the second task's none
        assert deliveries[0]["lastOutcome"] == "gone"
        assert deliveries[0]["lastHttpStatus"] == 410
        assert {d["state"] for d in deliveries} == {"disabled"}
        replay = await hook_server.http.post(
            hook_server.base + f"/webhooks/endpoints/{made['id']}/replay", json={"deliveryId": 1}
        )
        assert replay.status_code == 409
    assert len(gone.requests) == 1


async def test_a_redirect_is_not_followed(hook_server: HookServer) -> None:
    """A 3xx is a failure retried at the same URL; the Location is never requested."""
    async with HookReceiver() as elsewhere:
        moved = {"location": elsewhere.url}
        async with HookReceiver(lambda _n, _h, _b: (307, moved)) as redirecting:
            await hook_server.endpoint(redirecting.url, events=["completed"])
            await hook_server.run_task()
            await redirecting.wait_for(lambda got: len(got) >= 3)
            seen = await hook_server.attempts.wait_for(lambda s: len(s) >= 3)
    assert elsewhere.requests == []
    assert {(a.outcome, a.http_status, a.state) for a in seen} == {
        (Outcome.HTTP_3XX, 307, DeliveryState.PENDING)
    }


async def test_private_and_loopback_addresses_are_refused_at_connect_time(
    tmp_path: Path,
) -> None:
    """Without the loopback allow: an IP literal is refused at registration; a name is
    resolved at each attempt and refused when it resolves to a loopback or private
    address — a name rebound to 127.0.0.1 after it once resolved elsewhere too — and
    no connection is made."""
    options = dataclasses.replace(FAST, addresses=AddressPolicy())
    answers = iter(["10.0.0.7", "127.0.0.1", "169.254.169.254", "::1"])
    looked_up: list[str] = []

    async def rebinding(host: str, _port: int) -> list[str]:
        looked_up.append(host)
        return [next(answers, "127.0.0.1")]

    async with HookReceiver() as hooks:
        async with hooked(tmp_path, options, resolve=rebinding) as world:
            attempts = world.attempts
            for literal in ("127.0.0.1", "10.0.0.1", "[::1]", "169.254.169.254", "[fe80::1]"):
                refused = await world.register(f"http://{literal}:{hooks.port}/hook")
                assert refused.status_code == 400, literal
            await world.endpoint(f"http://rebound.test:{hooks.port}/hook", events=["completed"])
            await world.run_task()
            seen = await attempts.wait_for(lambda s: len(s) >= 4)
        assert hooks.requests == []
    assert looked_up[:4] == ["rebound.test"] * 4
    assert {a.outcome for a in seen} == {Outcome.ADDRESS_REFUSED}


async def test_throttling_answers_hold_the_whole_endpoint(hook_server: HookServer) -> None:
    """429 with Retry-After: the delivery's next attempt and the endpoint's other
    deliveries wait at least that long (stored, so a restart keeps it)."""
    async with HookReceiver(lambda _n, _h, _b: (429, {"retry-after": "600"})) as busy:
        await hook_server.endpoint(busy.url, events=["completed"])
        await hook_server.run_task()
        [attempted] = await hook_server.attempts.wait_for(lambda s: len(s) == 1)
        await hook_server.run_task()
    assert attempted.outcome is Outcome.THROTTLED
    assert attempted.next_attempt_at is not None
    assert attempted.next_attempt_at >= attempted.at + 600
    store = hook_server.server.store
    assert await store.next_delivery_due(time.time()) >= attempted.at + 600  # type: ignore[attr-defined]
    assert len(busy.requests) == 1  # the second task's delivery waits for the endpoint


@contextlib.asynccontextmanager
async def silent_receiver(tmp_path: Path, *, timeout_s: float) -> AsyncIterator[HookServer]:
    """A server whose attempts time out after ``timeout_s``, with an endpoint at a
    receiver that accepts the connection and never answers."""
    hold = asyncio.Event()

    async def silent(_reader: asyncio.StreamReader, _writer: asyncio.StreamWriter) -> None:
        await hold.wait()

    listener = await asyncio.start_server(silent, "127.0.0.1", 0)
    port = listener.sockets[0].getsockname()[1]
    options = dataclasses.replace(FAST, attempt_timeout_s=timeout_s)
    try:
        async with hooked(tmp_path, options) as world:
            await world.endpoint(f"http://127.0.0.1:{port}/hook", events=["completed"])
            yield world
    finally:
        hold.set()
        listener.close()


async def test_an_attempt_that_gets_no_answer_is_a_timeout(tmp_path: Path) -> None:
    """A receiver that accepts the connection and never answers: the attempt ends at its
    timeout, reported as the category ``timeout``."""
    async with silent_receiver(tmp_path, timeout_s=0.3) as world:
        await world.run_task()
        [attempted] = await world.attempts.wait_for(lambda s: len(s) >= 1)
        listed = await world.deliveries()
    assert attempted.outcome is Outcome.TIMEOUT
    assert listed[0]["lastOutcome"] == "timeout"
    assert "lastHttpStatus" not in listed[0]


async def test_replay_sends_again_each_freshly_signed(hook_server: HookServer) -> None:
    """Replaying one delivery, then a range: the same event ids arrive again, each with
    the timestamp and signature of its new attempt (verifiable now)."""
    async with HookReceiver() as hooks:
        made = await hook_server.endpoint(hooks.url)
        await hook_server.run_task()
        first = await hooks.wait_for(lambda got: len(got) == 2)
        # Received is not yet recorded: a replay of an attempt still in flight would
        # send it once more (harmless, and not what this test counts).
        await hook_server.attempts.wait_for(
            lambda seen: sum(a.state is DeliveryState.DELIVERED for a in seen) == 2
        )
        hook_server.server.manager.clock = lambda: time.time() + 30  # a later attempt
        hook_server.server.webhooks.sender.clock = hook_server.server.manager.clock  # type: ignore[union-attr]
        listed = await hook_server.deliveries()
        replay = hook_server.base + f"/webhooks/endpoints/{made['id']}/replay"
        one = await hook_server.http.post(replay, json={"deliveryId": listed[1]["deliveryId"]})
        assert one.status_code == 202
        assert one.json() == {"replayed": [listed[1]["deliveryId"]]}
        await hooks.wait_for(lambda got: len(got) == 3)
        both = await hook_server.http.post(
            replay, json={"from": listed[0]["deliveryId"], "to": listed[1]["deliveryId"]}
        )
        assert both.json()["replayed"] == [d["deliveryId"] for d in listed]
        everything = await hooks.wait_for(lambda got: len(got) == 5)
    assert everything[2].msg_id == listed[1]["eventId"]  # the first two went out at once
    assert sorted(ids_of(everything[3:])) == sorted(ids_of(first))
    for again in everything[2:]:
        original = next(r for r in first if r.msg_id == again.msg_id)
        assert again.body == original.body
        assert (
            int(again.headers["webhook-timestamp"])
            >= int(original.headers["webhook-timestamp"]) + 29
        )
        assert again.headers["webhook-signature"] != original.headers["webhook-signature"]
        Webhook(made["secret"]).verify(again.body, again.headers)  # fresh: within the window
    bad = await hook_server.http.post(
        hook_server.base + f"/webhooks/endpoints/{made['id']}/replay", json={"from": 5, "to": 1}
    )
    assert bad.status_code == 400


async def test_endpoints_and_deliveries_belong_to_their_principal(
    hook_server: HookServer,
) -> None:
    """Another principal sees no endpoint or delivery of ours, cannot replay or delete
    them, and our endpoint gets no delivery of its tasks."""
    async with HookReceiver() as hooks:
        made = await hook_server.endpoint(hooks.url)
        other = ModernClient(hook_server.http, hook_server.mcp.url, token="someone-else")
        await other.create("quick", {})
        mine = await hook_server.run_task()
        await hooks.wait_for(lambda got: len(got) == 2)
        theirs = await hook_server.http.get(
            hook_server.base + "/webhooks/endpoints",
            headers={"authorization": "Bearer someone-else"},
        )
        assert theirs.json() == {"endpoints": []}
        assert await hook_server.deliveries(token="someone-else") == []
        for method, path in (
            ("POST", f"/webhooks/endpoints/{made['id']}/replay"),
            ("DELETE", f"/webhooks/endpoints/{made['id']}"),
            ("GET", f"/webhooks/endpoints/{made['id']}"),
        ):
            answer = await hook_server.http.request(
                method, hook_server.base + path, json={"deliveryId": 1},
                headers={"authorization": "Bearer someone-else"},
            )  # fmt: skip
            assert answer.status_code == 404, (method, path)
    assert {json.loads(r.body)["data"]["taskId"] for r in hooks.requests} == {mine}


async def test_registration_refuses_what_it_cannot_use(hook_server: HookServer) -> None:
    """A bad URL, a key that cannot sign, unknown events: 400 with a reason; no key is
    shown after the registration that made it."""
    cases: list[dict[str, Any]] = [
        {"url": "ftp://a.example/x"},
        {"url": "https://user:pw@a.example/x"},
        {"url": "https://a.example/x#f"},
        {"url": "https://a.example/x", "secret": "whsec_c2hvcnQ="},
        {"url": "https://a.example/x", "secret": "whpk_" + "A" * 43 + "="},
        {"url": "https://a.example/x", "events": ["done"]},
        {"url": "https://a.example/x", "scheme": "v2"},
    ]
    for body in cases:
        answer = await hook_server.http.post(hook_server.base + "/webhooks/endpoints", json=body)
        assert answer.status_code == 400, body
        assert "whsec_c2hvcnQ" not in answer.text
    made = await hook_server.endpoint("https://a.example/x")
    parse_key(made["secret"])
    shown = await hook_server.http.get(hook_server.base + f"/webhooks/endpoints/{made['id']}")
    assert "secret" not in shown.json()
    assert "whsec_" not in shown.text


async def test_an_attempt_under_way_is_not_claimed_again_and_again(tmp_path: Path) -> None:
    """A delivery stays pending (and due) until its attempt is stored: while the attempt
    waits for an answer, the sender claims nothing again and again (each claim is a
    write transaction beside the server's own); it waits for a nudge instead."""
    claims: list[int] = []
    async with silent_receiver(tmp_path, timeout_s=0.5) as world:
        assert world.server.webhooks is not None
        store = world.server.webhooks.sender.store
        claim = store.claim_deliveries

        async def counted(*args: Any, **kwargs: Any) -> Any:
            claimed = await claim(*args, **kwargs)
            claims.append(len(claimed))
            return claimed

        store.claim_deliveries = counted  # type: ignore[method-assign]
        await world.run_task()
        [attempted] = await world.attempts.wait_for(lambda s: len(s) >= 1)
    assert attempted.outcome is Outcome.TIMEOUT
    assert 1 in claims
    # One empty claim per nudge that came while it was under way (the task's own
    # changes), at most: never claim after claim for the attempt's whole timeout.
    assert claims.count(0) <= 4, claims
