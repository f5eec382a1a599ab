"""Mutation tests of the real code: does some gate or check catch each planted bug?

Owns :data:`MUTANTS` — each a small, plausible bug in a REAL function of ``core``,
``runtime``, ``adapters`` or ``ledger`` (or of the webhook path, run with webhook
deliveries, or of the gateway's host-call decisions, run by the host world:
``Mutant.world``), applied by replacing that function (or table
entry) for the length of one run and restoring it after; nothing in the product
carries a flag for it — and :func:`catch_table`, which runs the CI seed corpus under
each mutant until a permutation fails, and says which gate or check caught it, at
which permutation. A failure the unmutated code also shows for that seed (a known
finding) is not counted as a catch.

Must not: be imported by the product's runtime paths (only ``longcall sim --mutants``
and the tests use it), or leave a mutant applied when it returns or raises.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import importlib
import os
from collections.abc import Callable, Iterator
from concurrent.futures import ProcessPoolExecutor
from typing import Any

from longcall.adapters.base import Outcome
from longcall.adapters.exchange import TransportFailure, settled
from longcall.adapters.mcp.rpc import RpcAnswer
from longcall.core import ResultKind, ServerStatus
from longcall.core.events import (
    CancelAcknowledged,
    CancellationObserved,
    CancelRefused,
    Event,
    ResultFetched,
    SubmissionNeverCreated,
)
from longcall.core.keys import canonical_json, digest_bytes
from longcall.core.record import OperationRecord, evolve
from longcall.core.retry import FailureKind
from longcall.errors import UnknownMutant
from longcall.sim.config import DEFAULT, PROFILES, Profile
from longcall.sim.hostworld import HostResult, guarded_host
from longcall.sim.report import derive_seed, guarded
from longcall.sim.webhooks import run_webhooks
from longcall.sim.world import Result, run_one

CI_PERMUTATIONS = 1000
"""The CI seed corpus: permutations 0..999 of seed 0 (tests/sim/test_gates.py)."""

Patch = tuple[str, str, Callable[[Any], Any]]
"""(module path, attribute path — ``Class.method`` or ``dict[Key]`` —, make(original))."""


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class Mutant:
    """One planted bug: what it breaks and which real functions it replaces."""

    name: str
    bug: str
    patches: tuple[Patch, ...]
    world: str = "calls"
    """The world that runs the code it plants in: ``calls``, ``webhooks`` (the calls with
    webhook deliveries, ``longcall sim --webhooks``) or ``host`` (the gateway)."""


# --- the replacements -------------------------------------------------------------------


def _floor_removed(original: Callable[..., float]) -> Callable[..., float]:
    def poll_delay_s(policy: Any, *, server_interval_s: float | None, **kw: Any) -> float:
        return original(policy, server_interval_s=None, **kw)

    return poll_delay_s


def _jitter_removed(original: Callable[..., float]) -> Callable[..., float]:
    def poll_delay_s(policy: Any, *, jitter: float, **kw: Any) -> float:
        return original(policy, jitter=0.0, **kw)

    return poll_delay_s


def _retry_after_ignored(original: Callable[..., Any]) -> Callable[..., Any]:
    def parse_retry_after(value: str | None, **kw: Any) -> float | None:
        return None

    return parse_retry_after


def _resent_as_idempotent(original: Callable[..., Any]) -> Callable[..., Any]:
    def handler(record: OperationRecord, event: Any, ctx: Any) -> Any:
        return original(evolve(record, tool_idempotent=True), event, ctx)

    return handler


def _lookup_skipped(original: Callable[..., Any]) -> Callable[..., Any]:
    def lookup(self: Any, record: OperationRecord) -> Any:
        return settled(Outcome(event=SubmissionNeverCreated()))

    return lookup


def _fresh_key_after_crash(original: Callable[..., Any]) -> Callable[..., Any]:
    """The key on the wire depends on the process incarnation (the execution epoch)."""

    def method(self: Any, record: OperationRecord, *args: Any) -> Any:
        if record.execution_epoch > 0:
            key = f"{record.submission_key}~{record.execution_epoch}"
            record = evolve(record, submission_key=key)
        return original(self, record, *args)

    return method


def _accept_before_fetch(original: Callable[..., Any]) -> Callable[..., Any]:
    def fetch_result(self: Any, record: OperationRecord) -> Any:
        payload = canonical_json({"taskId": record.operation_id, "status": "completed"})
        status = record.server_status or ServerStatus.COMPLETED
        event = ResultFetched(
            status=status, result_kind=ResultKind.VALUE, result_digest=digest_bytes(payload)
        )
        return settled(Outcome(event=event, payload=payload))

    return fetch_result


def _cancel_outcome_is_cancelled(kind: type[Event]) -> Callable[[Any], Any]:
    def make(original: Callable[..., Any]) -> Callable[..., Any]:
        def cancel(self: Any, record: OperationRecord) -> Any:
            outcome = yield from original(self, record)
            if isinstance(outcome.event, kind):
                payload = canonical_json({"taskId": record.operation_id, "status": "cancelled"})
                event = CancellationObserved(result_digest=digest_bytes(payload))
                return Outcome(event=event, payload=payload)
            return outcome

        return cancel

    return make


def _generation_ignored(original: Callable[..., Any]) -> Callable[..., Any]:
    def handler(record: OperationRecord, event: CancelAcknowledged, ctx: Any) -> Any:
        event = dataclasses.replace(event, cancel_generation=record.cancel_generation)
        return original(record, event, ctx)

    return handler


def _stale_epoch_accepted(original: Callable[..., Any]) -> Callable[..., Any]:
    def handle(record: OperationRecord, event: Event, **kw: Any) -> Any:
        return original(record, dataclasses.replace(event, execution_epoch=None), **kw)

    return handle


def _is_error_failed(original: Callable[..., Any]) -> Callable[..., Any]:
    def verify_result(result: Any, **kw: Any) -> Any:
        if isinstance(result, dict) and result.get("isError") is True:
            kw["status"] = ServerStatus.FAILED
        return original(result, **kw)

    return verify_result


def _null_id_is_answer(original: Callable[..., Any]) -> Callable[..., Any]:
    def answer_of(message: Any, request_id: int, status: int) -> Any:
        if isinstance(message, dict) and message.get("id") is None and "error" in message:
            return RpcAnswer(error=message["error"], http_status=status)
        return original(message, request_id, status)

    return answer_of


def _stream_end_is_answer(original: Callable[..., Any]) -> Callable[..., Any]:
    def read_stream(reply: Any, request_id: int) -> Any:
        out = original(reply, request_id)
        if isinstance(out, TransportFailure) and out.kind is FailureKind.TRANSPORT:
            return RpcAnswer(stopped=True, http_status=reply.status)
        return out

    return read_stream


def _identity_unchecked(original: Callable[..., Any]) -> Callable[..., Any]:
    def unchecked(*args: Any, **kw: Any) -> None:
        return None

    return unchecked


def _name_unchecked(original: Callable[..., Any]) -> Callable[..., Any]:
    def check_operation(body: Any, *, expected_name: str | None = None) -> Any:
        return original(body)

    return check_operation


def _answers_to_pending(original: Callable[..., Any]) -> Callable[..., Any]:
    def record_answers(ledger: Any, record: OperationRecord, answers: Any, **kw: Any) -> Any:
        answers = dict(zip(record.input_keys_pending, answers.values(), strict=False))
        return original(ledger, record, answers, **kw)

    return record_answers


def _replaced(original: str, old: str, new: str) -> str:
    """``original`` with ``old`` replaced; a statement that no longer holds ``old`` is
    an error here, not a mutant that silently changes nothing."""
    if old not in original:
        raise LookupError(f"the mutant's text {old!r} is not in {original!r}")
    return original.replace(old, new)


def _cas_removed_from_open(updates: dict[tuple[bool, bool, bool], str]) -> dict[Any, str]:
    """The CAS taken out of the unfenced writes to an open state (both forms)."""
    cas, kept = " AND version = ?9 AND version + 1 = ?10", " AND ?9 > 0 AND ?10 > 0"
    return {
        key: _replaced(sql, cas, kept) if key[:2] == (False, False) else sql
        for key, sql in updates.items()
    }


def _fence_removed_sql(original: str) -> str:
    return _replaced(
        original, " AND owner = ? AND execution_epoch = ?", " AND ? IS NOT NULL AND ? IS NOT NULL"
    )


def _fence_removed_from_updates(updates: dict[tuple[bool, bool, bool], str]) -> dict[Any, str]:
    """The fence taken out of every fenced write."""
    return {key: _fence_removed_sql(sql) if key[1] else sql for key, sql in updates.items()}


def _fence_unchecked(original: Callable[..., Any]) -> Callable[..., Any]:
    def check_fence(*args: Any) -> None:
        return None

    return check_fence


def _every_lease_lapsed(original: str) -> str:
    return "SELECT owner FROM workers WHERE ? IS NOT NULL"


def _shed_every_round(original: Callable[..., Any]) -> Callable[..., Any]:
    """After each claim round, hand back everything held that has nothing in flight."""

    def share_round(self: Any, now: float, claimant: Any) -> None:
        original(self, now, claimant)
        busy = claimant.busy_nodes()
        idle = [n for n in claimant.records if n not in busy]
        self.shell.release(self.owner, idle)
        for node in idle:
            claimant.let_go(node)

    return share_round


def _never_joins(original: Callable[..., bool]) -> Callable[..., bool]:
    def joins(**kw: Any) -> bool:
        return False

    return joins


def _principal_ignored(original: Callable[..., Any]) -> Callable[..., Any]:
    """The call's handle and node are derived as if every host were one principal."""

    def derive(first: Any, *args: Any) -> Any:
        if isinstance(first, str):  # node_for(principal, handle)
            return original("", *args)
        return original(first, dataclasses.replace(args[0], principal=""), *args[1:])

    return derive


# --- the catalogue ------------------------------------------------------------------------


def _any_signature(original: Callable[..., Any]) -> Callable[..., Any]:
    def _any_matches(self: Any, content: bytes, signatures: Any) -> bool:
        return True

    return _any_matches


def _woken_at_once(original: Callable[..., Any]) -> Callable[..., Any]:
    def wake(self: Any, record: Any, *, now: float) -> None:
        planned = self._pending.get((record.call_node_id, "Poll"))
        if planned is not None and planned[0] > now:
            self.plan(record.call_node_id, planned[2], now)

    return wake


def _cancelled_hint_is_outcome(original: Callable[..., Any]) -> Callable[..., Any]:
    def hint(self: Any, *, status: str | None, now: float, **kw: Any) -> list[str]:
        woken: list[str] = original(self, status=status, now=now, **kw)
        if status == "cancelled":
            body = canonical_json({"status": status})
            evidence = CancellationObserved(result_digest=digest_bytes(body))
            for node in woken:
                self._apply(self.records[node], evidence, now=now, payload=body)
        return woken

    return hint


_MACHINE = "longcall.core.machine"
_MODERN = "longcall.adapters.mcp.modern"
_LEGACY = "longcall.adapters.mcp.legacy"
_AIP151 = "longcall.adapters.aip151.mapping"
_APIFY = "longcall.adapters.apify.mapping"
_HANDLERS = "_HANDLERS[longcall.core.events."

MUTANTS: tuple[Mutant, ...] = (
    Mutant(
        name="poll-floor-removed",
        bug="the server's poll interval is not the floor of the schedule",
        patches=((_MACHINE, "poll_delay_s", _floor_removed),),
    ),
    Mutant(
        name="jitter-removed",
        bug="polls go exactly at the floor, without jitter",
        patches=((_MACHINE, "poll_delay_s", _jitter_removed),),
    ),
    Mutant(
        name="retry-after-ignored",
        bug="a 429/503's Retry-After header is not read",
        patches=(
            ("longcall.adapters.exchange", "parse_retry_after", _retry_after_ignored),
            (_AIP151, "parse_retry_after", _retry_after_ignored),
        ),
    ),
    Mutant(
        name="non-idempotent-create-resent",
        bug="a lost create of a non-idempotent tool is sent again",
        patches=((_MACHINE, f"{_HANDLERS}SubmitOutcomeLost]", _resent_as_idempotent),),
    ),
    Mutant(
        name="lookup-skipped",
        bug="a lost create is taken as never created without asking by key",
        patches=(
            (_MODERN, "ModernMapping.lookup", _lookup_skipped),
            (_LEGACY, "LegacyMapping.lookup", _lookup_skipped),
            (_AIP151, "Aip151Mapping.lookup", _lookup_skipped),
        ),
    ),
    Mutant(
        name="fresh-key-after-crash",
        bug="after a restart the create and the lookup carry a fresh submission key",
        patches=(
            (_MODERN, "ModernMapping.submit", _fresh_key_after_crash),
            (_MODERN, "ModernMapping.lookup", _fresh_key_after_crash),
            (_LEGACY, "LegacyMapping.submit", _fresh_key_after_crash),
            (_LEGACY, "LegacyMapping.lookup", _fresh_key_after_crash),
            (_AIP151, "Aip151Mapping.submit", _fresh_key_after_crash),
            (_AIP151, "Aip151Mapping.lookup", _fresh_key_after_crash),
            (_APIFY, "ApifyMapping.submit", _fresh_key_after_crash),
        ),
    ),
    Mutant(
        name="accept-before-fetch",
        bug="a terminal status is accepted without fetching its result",
        patches=(
            (_MODERN, "ModernMapping.fetch_result", _accept_before_fetch),
            (_LEGACY, "LegacyMapping.fetch_result", _accept_before_fetch),
            (_AIP151, "Aip151Mapping.fetch_result", _accept_before_fetch),
            (_APIFY, "ApifyMapping.fetch_result", _accept_before_fetch),
        ),
    ),
    Mutant(
        name="cancel-ack-is-cancelled",
        bug="a 2026-07-28 (or AIP-151) cancel ack is taken for the cancelled terminal",
        patches=(
            (_MODERN, "ModernMapping.cancel", _cancel_outcome_is_cancelled(CancelAcknowledged)),
            (_AIP151, "Aip151Mapping.cancel", _cancel_outcome_is_cancelled(CancelAcknowledged)),
        ),
    ),
    Mutant(
        name="refused-cancel-is-cancelled",
        bug="a 2025-11-25 -32602 on cancel of a terminal task is taken as cancelled",
        patches=((_LEGACY, "LegacyMapping.cancel", _cancel_outcome_is_cancelled(CancelRefused)),),
    ),
    Mutant(
        name="cancel-generation-ignored",
        bug="an older generation's cancel ack is accepted for the current one",
        patches=((_MACHINE, f"{_HANDLERS}CancelAcknowledged]", _generation_ignored),),
    ),
    Mutant(
        name="stale-epoch-accepted",
        bug="a reply to an older execution epoch is applied",
        patches=(("longcall.runtime.step", "handle", _stale_epoch_accepted),),
    ),
    Mutant(
        name="is-error-is-failed",
        bug="a 2026-07-28 tool error (isError: true) is mapped to failed",
        patches=((_MODERN, "verify_result", _is_error_failed),),
    ),
    Mutant(
        name="null-id-error-is-outcome",
        bug="a JSON-RPC error with id: null is read as the answer to our request",
        patches=(("longcall.adapters.mcp.rpc", "_answer_of", _null_id_is_answer),),
    ),
    Mutant(
        name="truncated-result-accepted",
        bug="an event stream that ends before the answer is read as an answer",
        patches=(("longcall.adapters.mcp.rpc", "_read_stream", _stream_end_is_answer),),
    ),
    Mutant(
        name="foreign-result-accepted",
        bug="a status or result about another task is read as ours",
        patches=(
            # The poll reads of both versions check identity in mcp.common.task_status;
            # the 2026-07-28 re-fetch and the 2025-11-25 result in their own modules.
            ("longcall.adapters.mcp.common", "check_task_identity", _identity_unchecked),
            (_MODERN, "check_task_identity", _identity_unchecked),
            (_LEGACY, "check_task_identity", _identity_unchecked),
            (_LEGACY, "related_task", _identity_unchecked),
            (_AIP151, "check_operation", _name_unchecked),
            (_APIFY, "_check_run_identity", _identity_unchecked),
        ),
    ),
    Mutant(
        name="stale-round-answered",
        bug="an answer given for an earlier input round is delivered for the pending one",
        patches=(("longcall.runtime.step", "record_answers", _answers_to_pending),),
    ),
    Mutant(
        name="cas-removed",
        bug="the ledger's update does not compare the version it read",
        patches=(("longcall.ledger.sqlite", "_GUARDED_UPDATES", _cas_removed_from_open),),
    ),
)
MUTANTS += (
    Mutant(
        name="fence-removed",
        bug="the ledger no longer checks a worker's (owner, epoch) on its writes",
        patches=(
            ("longcall.ledger.sqlite", "_GUARDED_UPDATES", _fence_removed_from_updates),
            ("longcall.ledger.sql", "check_fence", _fence_unchecked),
        ),
    ),
    Mutant(
        name="lease-ignored",
        bug="a claim takes operations from workers whose lease has not run out",
        patches=(("longcall.ledger.sql", "_LAPSED_OWNERS", _every_lease_lapsed),),
    ),
    Mutant(
        name="shed-every-round",
        bug="a worker hands back what it holds at every claim round: claims ping-pong",
        patches=(("longcall.runtime.claims", "Claims.share_round", _shed_every_round),),
    ),
    Mutant(
        name="webhook-unverified",
        bug="the webhook receiver takes any signature: a forged delivery is a hint",
        patches=(("longcall.adapters.webhooks", "Verifier._any_matches", _any_signature),),
        world="webhooks",
    ),
    Mutant(
        name="webhook-poll-at-once",
        bug="a webhook hint polls at once, under the server's interval",
        patches=(("longcall.runtime.scheduler", "Scheduler.wake", _woken_at_once),),
        world="webhooks",
    ),
    Mutant(
        name="webhook-status-is-outcome",
        bug="a verified delivery saying cancelled is taken as the cancelled outcome",
        patches=(("longcall.runtime.engine", "Engine.hint", _cancelled_hint_is_outcome),),
        world="webhooks",
    ),
)
_REPEATS = "longcall.gateway.repeats"
MUTANTS += (
    Mutant(
        name="same-call-never-attaches",
        bug="a host's retry of a call still running starts the upstream again",
        patches=((_REPEATS, "joins", _never_joins),),
        world="host",
    ),
    Mutant(
        name="same-call-ignores-principal",
        bug="the same call from another principal attaches to the first one's call",
        patches=(
            (_REPEATS, "handle_for", _principal_ignored),
            (_REPEATS, "node_for", _principal_ignored),
            ("longcall.gateway.hostcalls", "node_for", _principal_ignored),
        ),
        world="host",
    ),
)
BY_NAME = {m.name: m for m in MUTANTS}


def mutant(name: str) -> Mutant:
    """The catalogued mutant ``name``; an unknown name is a typed error."""
    found = BY_NAME.get(name)
    if found is None:
        raise UnknownMutant(f"unknown mutant {name!r}; known: {', '.join(BY_NAME)}")
    return found


# --- applying one -------------------------------------------------------------------------


def _resolve(module_path: str, attribute: str) -> tuple[Any, Any]:
    """The container and the key of ``attribute`` in ``module_path``."""
    owner: Any = importlib.import_module(module_path)
    if attribute.endswith("]"):
        table, _, key_path = attribute[:-1].partition("[")
        key_module, _, key_name = key_path.rpartition(".")
        key = getattr(importlib.import_module(key_module), key_name)
        return getattr(owner, table), key
    *parents, name = attribute.split(".")
    for parent in parents:
        owner = getattr(owner, parent)
    return owner, name


@contextlib.contextmanager
def applied(planted: Mutant) -> Iterator[None]:
    """Replace the mutant's real functions for the block, then put them back."""
    undo: list[Callable[[], None]] = []
    try:
        for module_path, attribute, make in planted.patches:
            owner, key = _resolve(module_path, attribute)
            if isinstance(owner, dict):
                original = owner[key]
                owner[key] = make(original)
                undo.append(functools.partial(owner.__setitem__, key, original))
            else:
                original = getattr(owner, key)
                setattr(owner, key, make(original))
                undo.append(functools.partial(setattr, owner, key, original))
        yield
    finally:
        for restore in reversed(undo):
            restore()


# --- catching -----------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class Catch:
    """Which gate or check first caught a mutant, and where (None: it survived)."""

    mutant: str
    bug: str
    check: str | None
    permutation: int | None
    seed: int | None
    detail: str = ""

    @property
    def caught(self) -> bool:
        return self.check is not None


def catch(
    planted: Mutant,
    *,
    seed: int = 0,
    permutations: int = CI_PERMUTATIONS,
    profile: Profile = DEFAULT,
) -> Catch:
    """Run the corpus under ``planted`` until a permutation fails that passes without it."""
    run = _world_runner(planted.world, profile)
    for index in range(permutations):
        world_seed = derive_seed(seed, index)
        with applied(planted):
            result = run(world_seed)
        if not result.violations:
            continue
        baseline = run(world_seed)
        known = {(v.check, v.detail) for v in baseline.violations}
        new = [v for v in result.violations if (v.check, v.detail) not in known]
        if new:
            return Catch(
                mutant=planted.name,
                bug=planted.bug,
                check=new[0].check,
                permutation=index,
                seed=world_seed,
                detail=new[0].detail,
            )
    return Catch(mutant=planted.name, bug=planted.bug, check=None, permutation=None, seed=None)


def _world_runner(world: str, profile: Profile) -> Callable[[int], Result | HostResult]:
    """One guarded permutation of the world a mutant's code runs in."""
    if world == "host":
        return functools.partial(guarded_host, profile=profile)
    one = run_webhooks if world == "webhooks" else run_one
    return functools.partial(guarded, functools.partial(one, profile=profile))


def _catch_job(job: tuple[str, int, int, str]) -> Catch:
    name, seed, permutations, profile = job
    return catch(mutant(name), seed=seed, permutations=permutations, profile=PROFILES[profile])


def catch_table(
    names: list[str] | None = None,
    *,
    seed: int = 0,
    permutations: int = CI_PERMUTATIONS,
    profile: Profile = DEFAULT,
    workers: int | None = None,
) -> list[Catch]:
    """Every (or each named) mutant against the corpus, in catalogue order."""
    chosen = [mutant(name) for name in names] if names else list(MUTANTS)
    jobs = [(m.name, seed, permutations, profile.name) for m in chosen]
    if workers is None:
        workers = min(2, os.cpu_count() or 1)
    if workers <= 1 or len(jobs) <= 1:
        return [_catch_job(job) for job in jobs]
    with ProcessPoolExecutor(max_workers=workers) as pool:
        return list(pool.map(_catch_job, jobs))


__all__ = [
    "CI_PERMUTATIONS",
    "MUTANTS",
    "Catch",
    "Mutant",
    "UnknownMutant",
    "applied",
    "catch",
    "catch_table",
    "mutant",
]
