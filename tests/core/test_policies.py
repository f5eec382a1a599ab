"""Property tests of the pure policies: keys and digests (X2, L5), the poll schedule and
token bucket (X3), retry classification, backoff and the circuit breaker (X9), and
not-found classification (X7).
"""

from __future__ import annotations

import dataclasses
import hashlib
import re

from hypothesis import example, given, settings
from hypothesis import strategies as st

from longcall.core import events as e
from longcall.core.keys import canonical_json, derive_submission_key, request_digest
from longcall.core.notfound import NotFoundClass, classify_not_found
from longcall.core.retry import (
    BreakerState,
    CircuitBreaker,
    FailureKind,
    RetryPolicy,
    backoff_delay_s,
    is_retryable,
)
from longcall.core.schedule import PollPolicy, TokenBucket, poll_delay_s
from longcall.core.states import State

from .builders import record_in, step

EPS = 1e-9
node_ids = st.text(min_size=0, max_size=20)
steps = st.integers(0, 10_000)
jitters = st.floats(0.0, 1.0)
json_leaf = st.none() | st.booleans() | st.integers() | st.text(max_size=5)
json_values = st.recursive(
    json_leaf,
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=4), inner, max_size=4)
    ),
    max_leaves=12,
)
poll_policies = st.builds(
    PollPolicy,
    interval_s_default=st.floats(0.01, 100.0),
    interval_s_min=st.floats(0.0, 10.0),
    jitter_fraction=st.floats(0.0, 1.0),
    backoff_factor=st.floats(1.0, 4.0),
    backoff_cap_s=st.floats(0.0, 1000.0),
)
server_intervals = st.none() | st.floats(0.0, 500.0)


def _floor(policy: PollPolicy, server_interval_s: float | None) -> float:
    return max(policy.interval_s_min, server_interval_s or policy.interval_s_default)


# --- keys and digests (X2, L5) -------------------------------------------------------


@given(node_ids, steps)
def test_submission_key_is_deterministic_and_well_formed(node: str, index: int) -> None:
    """The same (node, step) always gives the same lc1- key of 32 hex digits."""
    key = derive_submission_key(node, index)
    assert key == derive_submission_key(node, index)
    assert re.fullmatch(r"lc1-[0-9a-f]{32}", key)


@given(node_ids, steps, node_ids, steps)
def test_submission_keys_are_distinct_for_distinct_steps(a: str, i: int, b: str, j: int) -> None:
    """Distinct (node, step) pairs never share a key."""
    if (a, i) != (b, j):
        assert derive_submission_key(a, i) != derive_submission_key(b, j)


def test_submission_key_separates_tricky_ids() -> None:
    """("a:1", 0) and ("a", 10) and friends get different keys; the format is stable."""
    tricky = [("a:1", 0), ("a", 10), ("a:", 10), ("a", 1), ("", 0), ("1:a", 0), ("a:10", 0)]
    keys = [derive_submission_key(n, s) for n, s in tricky]
    assert len(set(keys)) == len(keys)
    # Stable across releases: a replay after an upgrade must send the same key (X2).
    assert derive_submission_key("run-1/node-7", 0) == derive_submission_key("run-1/node-7")
    assert derive_submission_key("a", 0) == "lc1-" + hashlib.sha256(b"1:a:0").hexdigest()[:32]


@given(st.dictionaries(st.text(max_size=5), json_values, max_size=6), st.randoms())
def test_canonical_json_ignores_key_order(value: dict[str, object], rnd: object) -> None:
    """Dict key order never changes the canonical bytes or the request digest."""
    items = list(value.items())
    rnd.shuffle(items)  # type: ignore[attr-defined]
    shuffled = dict(items)
    assert canonical_json(shuffled) == canonical_json(value)
    assert request_digest("tool", shuffled) == request_digest("tool", value)
    assert request_digest("tool", value) != request_digest("other", value)


# --- poll schedule (X3) --------------------------------------------------------------


@given(
    poll_policies, server_intervals, st.integers(0, 30), jitters, st.none() | st.floats(0.0, 1000.0)
)
def test_poll_delay_never_below_the_floor_nor_retry_after(
    policy: PollPolicy,
    interval: float | None,
    backoff: int,
    jitter: float,
    retry_after: float | None,
) -> None:
    """The delay is ≥ the server floor, ≥ interval_s_min and ≥ Retry-After."""
    delay = poll_delay_s(
        policy,
        server_interval_s=interval,
        backoff_step=backoff,
        jitter=jitter,
        retry_after_s=retry_after,
    )
    assert delay >= _floor(policy, interval) - EPS
    assert delay >= policy.interval_s_min
    if interval is not None:
        assert delay >= interval - EPS
    if retry_after is not None:
        assert delay >= retry_after


@given(poll_policies, server_intervals, jitters)
def test_poll_delay_at_step_zero_is_within_the_jitter_band(
    policy: PollPolicy, interval: float | None, jitter: float
) -> None:
    """At backoff step 0 the delay is at most floor × (1 + jitter_fraction)."""
    floor = _floor(policy, interval)
    delay = poll_delay_s(policy, server_interval_s=interval, backoff_step=0, jitter=jitter)
    assert floor - EPS <= delay <= floor * (1 + policy.jitter_fraction) + EPS


@example(PollPolicy(), 55.0, 0, 1.0)  # a server interval just under the cap
@example(PollPolicy(backoff_factor=1.1), 2.0, 0, 1.0)  # a factor below 1 + jitter_fraction
@given(poll_policies, server_intervals, st.integers(0, 30), jitters)
def test_poll_delay_ceiling_grows_with_the_step_and_respects_the_cap(
    policy: PollPolicy, interval: float | None, backoff: int, jitter: float
) -> None:
    """For a fixed draw the delay never shrinks as the step grows, and stays ≤ cap ≥ floor."""
    now = poll_delay_s(policy, server_interval_s=interval, backoff_step=backoff, jitter=jitter)
    nxt = poll_delay_s(policy, server_interval_s=interval, backoff_step=backoff + 1, jitter=jitter)
    assert nxt >= now - EPS
    if policy.backoff_cap_s >= _floor(policy, interval):
        assert now <= policy.backoff_cap_s + EPS


# --- retry (X9) ----------------------------------------------------------------------


@given(st.floats(0.0, 10.0), st.floats(0.0, 100.0), st.integers(1, 60), jitters)
def test_backoff_is_full_jitter_under_the_ceiling(
    base: float, cap: float, attempt: int, jitter: float
) -> None:
    """backoff_delay_s is in [0, min(cap, base·2^(n−1))]."""
    policy = RetryPolicy(base_s=base, cap_s=cap)
    delay = backoff_delay_s(policy, attempt, jitter)
    assert 0.0 <= delay <= min(cap, base * 2.0 ** (attempt - 1)) + EPS


def test_retryable_set_is_exactly_the_documented_one() -> None:
    """429/5xx/transport (and malformed bodies) retry; 400/401/403/validation, an answer
    over a size cap, a refused redirect and an answer about another operation never do
    (C3, C4)."""
    retryable = {f for f in FailureKind if is_retryable(f)}
    assert retryable == {
        FailureKind.CONNECT_FAILED,
        FailureKind.TRANSPORT,
        FailureKind.TIMEOUT,
        FailureKind.RATE_LIMITED,
        FailureKind.UNAVAILABLE,
        FailureKind.SERVER_ERROR,
        FailureKind.MALFORMED_RESPONSE,
    }
    assert set(FailureKind) - retryable == {
        FailureKind.BAD_REQUEST,
        FailureKind.UNAUTHORIZED,
        FailureKind.FORBIDDEN,
        FailureKind.VALIDATION,
        FailureKind.TOO_LARGE,
        FailureKind.REDIRECT_REFUSED,
        FailureKind.FOREIGN_IDENTITY,
        FailureKind.REFUSED_UNREAD,
    }


# --- token bucket (X3) ---------------------------------------------------------------


@settings(max_examples=300)
@given(
    st.floats(0.1, 50.0),
    st.integers(1, 5),
    st.lists(st.floats(0.0, 5.0), min_size=1, max_size=60),
    st.booleans(),
)
def test_token_bucket_never_exceeds_the_rate(
    rate: float, burst: int, gaps: list[float], shuffle_back: bool
) -> None:
    """In any window of length w at most burst + rate·w sends happen."""
    bucket = TokenBucket.full(rate, burst=burst, now=0.0)
    sends: list[float] = []
    now = 0.0
    for i, gap in enumerate(gaps):
        # Callers may read the clock a little before they take (now can lag behind).
        call_at = now - gap if (shuffle_back and i % 3 == 2) else now + gap
        call_at = max(call_at, 0.0)
        now = max(now, call_at)
        bucket, wait = bucket.take(call_at)
        assert wait >= 0.0
        sends.append(call_at + wait)
    sends.sort()
    for i, start in enumerate(sends):
        for j in range(i, len(sends)):
            window = sends[j] - start
            assert j - i + 1 <= burst + rate * window + 1e-6


# --- circuit breaker (X9) ------------------------------------------------------------


@given(
    st.integers(1, 6), st.floats(0.1, 100.0), st.lists(st.sampled_from(FailureKind), max_size=20)
)
def test_breaker_opens_after_retryable_failures_only(
    failures_max: int, reset_s: float, failures: list[FailureKind]
) -> None:
    """The breaker opens after failures_max retryable failures; others do not count."""
    breaker = CircuitBreaker(failures_max=failures_max, reset_s=reset_s)
    counted = 0
    for failure in failures:
        breaker = breaker.on_failure(0.0, failure)
        counted += is_retryable(failure)
        expected = BreakerState.OPEN if counted >= failures_max else BreakerState.CLOSED
        assert breaker.state is expected
        assert breaker.allows(0.0) is (expected is BreakerState.CLOSED)


def test_breaker_half_opens_after_reset_and_closes_on_success() -> None:
    """Open → (reset_s later) half-open trial → success closes; failure reopens."""
    breaker = CircuitBreaker(failures_max=2, reset_s=30.0)
    breaker = breaker.on_failure(10.0, FailureKind.BAD_REQUEST)
    assert breaker.state is BreakerState.CLOSED
    breaker = breaker.on_failure(10.0, FailureKind.TIMEOUT).on_failure(11.0, FailureKind.TIMEOUT)
    assert breaker.state is BreakerState.OPEN
    assert breaker.retry_at() == 41.0
    assert not breaker.allows(40.9)
    assert breaker.on_request(40.9).state is BreakerState.OPEN
    trial = breaker.on_request(41.0)
    assert trial.state is BreakerState.HALF_OPEN
    assert trial.on_success() == CircuitBreaker(failures_max=2, reset_s=30.0)
    reopened = trial.on_failure(42.0, FailureKind.SERVER_ERROR)
    assert reopened.state is BreakerState.OPEN
    assert reopened.opened_at == 42.0


# --- not found (X7) ------------------------------------------------------------------


@given(st.sampled_from(list(State)), st.booleans())
def test_classify_not_found(state: State, proven_by_key: bool) -> None:
    """NEVER_CREATED needs a proof by key and no operation id; terminal keeps its receipt."""
    record = record_in(state)
    got = classify_not_found(record, proven_by_key=proven_by_key)
    if record.is_terminal:
        assert got is NotFoundClass.EXPIRED_WITH_RECEIPT
    elif proven_by_key and record.operation_id is None:
        assert got is NotFoundClass.NEVER_CREATED
    else:
        assert got is NotFoundClass.UNKNOWN


def test_classify_not_found_never_created_needs_both() -> None:
    """A key proof with an operation id recorded, or no proof at all, stays UNKNOWN."""
    unknown = record_in(State.SUBMISSION_UNKNOWN)
    assert classify_not_found(unknown, proven_by_key=True) is NotFoundClass.NEVER_CREATED
    assert classify_not_found(unknown, proven_by_key=False) is NotFoundClass.UNKNOWN
    with_id = dataclasses.replace(unknown, operation_id="op-9")
    assert classify_not_found(with_id, proven_by_key=True) is NotFoundClass.UNKNOWN
    escalated = step(record_in(State.WORKING), e.ReconciliationEscalated(reason="r")).record
    assert classify_not_found(escalated, proven_by_key=True) is NotFoundClass.UNKNOWN


@given(
    limit=st.integers(min_value=1, max_value=30),
    gaps=st.lists(st.floats(min_value=0.0, max_value=0.3), min_size=1, max_size=200),
    start_s=st.sampled_from([0.0, 1_795_000_000.0]),
)
def test_window_limit_never_admits_more_than_limit_per_window(
    limit: int, gaps: list[float], start_s: float
) -> None:
    """WindowLimit: sends at the admitted times never exceed ``limit`` in any window (X3)."""
    from longcall.core.schedule import WindowLimit

    window = WindowLimit(limit=limit, window_s=1.0)
    now, sent = start_s, []
    for gap in gaps:
        now += gap
        window, wait_s = window.admit(now)
        while wait_s > 0.0:
            assert now + wait_s > now  # a refusal always moves time forward
            now += wait_s
            window, wait_s = window.admit(now)
        sent.append(now)
    for start in sent:
        assert sum(1 for t in sent if 0 <= t - start < 1.0) <= limit
