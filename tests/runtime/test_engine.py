"""The executor's decision loop (runtime.engine) against a scripted server, in virtual time."""

from __future__ import annotations

import itertools
import random
from collections.abc import Callable
from pathlib import Path

import pytest

from longcall.adapters.base import Outcome, ToolBinding
from longcall.core import RequestDigestMismatch, ServerStatus, State
from longcall.core import events as e
from longcall.core.keys import canonical_json, digest_bytes
from longcall.core.record import ResultKind
from longcall.ledger import Ledger, SQLiteLedger
from longcall.runtime.engine import Action, CallSpec, Engine
from longcall.runtime.inputs import answer_blob
from longcall.runtime.step import request_cancel

RESULT = canonical_json({"rows": [1]})


def binding(**overrides: object) -> ToolBinding:
    values: dict[str, object] = {
        "server": "sim://a",
        "tool_name": "report",
        "protocol": "test",
        "adapter_version": "1",
        "descriptor_digest": "sha256:d",
        "task_support": "required",
        "idempotent": False,
        "submission_lookup": True,
    }
    values.update(overrides)
    return ToolBinding(**values)  # type: ignore[arg-type]


class ScriptedServer:
    """Answers every action the way a well-behaved task server would."""

    def __init__(self, *, polls_until_done: int = 3, interval_s: float = 1.0) -> None:
        self.polls_until_done = polls_until_done
        self.interval_s = interval_s
        self.created: dict[str, str] = {}
        self.polls: dict[str, list[float]] = {}
        self.cancelled: set[str] = set()

    def answer(self, action: Action, now: float) -> Outcome | None:
        node = action.call_node_id
        op = f"op-{node}"
        match action.kind:
            case "SendSubmit":
                self.created[action.record.submission_key] = op
                return Outcome(
                    event=e.SubmitAcknowledged(operation_id=op, poll_interval_s=self.interval_s)
                )
            case "LookupSubmission":
                if action.record.submission_key in self.created:
                    return Outcome(event=e.SubmissionFound(operation_id=op))
                return Outcome(event=e.SubmissionNeverCreated())
            case "Poll":
                seen = self.polls.setdefault(node, [])
                seen.append(now)
                if node in self.cancelled:
                    evidence = canonical_json({"status": "cancelled"})
                    return Outcome(
                        event=e.CancellationObserved(result_digest=digest_bytes(evidence)),
                        payload=evidence,
                    )
                if len(seen) >= self.polls_until_done:
                    return Outcome(event=e.TerminalObserved(status=ServerStatus.COMPLETED))
                return Outcome(event=e.WorkingObserved())
            case "FetchResult":
                return Outcome(
                    event=e.ResultFetched(
                        status=ServerStatus.COMPLETED,
                        result_kind=ResultKind.VALUE,
                        result_digest=digest_bytes(RESULT),
                    ),
                    payload=RESULT,
                )
            case "SendCancel":
                self.cancelled.add(node)
                return Outcome(
                    event=e.CancelAcknowledged(cancel_generation=action.record.cancel_generation)
                )
            case "SendInputResponse":
                return None
        raise AssertionError(action.kind)


def run(
    engine: Engine,
    server: ScriptedServer,
    *,
    now: float = 0.0,
    until: float = 10_000.0,
    latency_s: float = 0.05,
    each: Callable[[float], None] | None = None,
) -> float:
    """Drive the engine in virtual time until nothing is planned (or ``until``)."""
    for _ in range(100_000):
        wake = engine.next_wakeup()
        if wake is None or wake > until:
            return now
        now = max(now, wake)
        for action in engine.due(now):
            outcome = server.answer(action, now)
            if outcome is None:
                engine.end_without_reply(action)
            else:
                engine.apply_reply(action, outcome, now=now + latency_s)
        if each is not None:
            each(now)
    raise AssertionError("did not settle")


@pytest.fixture
def ledger(tmp_path: Path) -> Ledger:
    """A real SQLite file ledger."""
    return SQLiteLedger(tmp_path / "l.db", synchronous="off")


def test_calls_complete_with_one_receipt_each(ledger: Ledger) -> None:
    """Three calls run to ACCEPTED; each has one receipt and one outbox row."""
    accepted: list[str] = []
    engine = Engine(
        ledger, rng=random.Random(1), on_accepted=lambda r: accepted.append(r.call_node_id)
    )
    for i in range(3):
        engine.start_call(
            CallSpec(call_node_id=f"n{i}", binding=binding(), arguments={"i": i}), now=0.0
        )
    run(engine, ScriptedServer())
    assert sorted(accepted) == ["n0", "n1", "n2"]
    assert [ledger.get(f"n{i}").state for i in range(3)] == [State.ACCEPTED] * 3
    assert len(ledger.receipts()) == 3
    assert len(ledger.outbox()) == 3
    assert engine.request_payload("n1") == {"i": 1}


def test_same_node_attaches_and_different_arguments_are_refused(ledger: Ledger) -> None:
    """A call node is one request: same arguments attach, different ones raise (X2)."""
    engine = Engine(ledger, rng=random.Random(1))
    first = engine.start_call(
        CallSpec(call_node_id="n", binding=binding(), arguments={"a": 1}), now=0.0
    )
    again = engine.start_call(
        CallSpec(call_node_id="n", binding=binding(), arguments={"a": 1}), now=1.0
    )
    assert again.call_node_id == first.call_node_id
    assert len(ledger.list_by_state()) == 1
    with pytest.raises(RequestDigestMismatch):
        engine.start_call(
            CallSpec(call_node_id="n", binding=binding(), arguments={"a": 2}), now=1.0
        )


def test_polls_respect_server_interval_and_shared_qps(ledger: Ledger) -> None:
    """No operation is polled sooner than its interval; a server never sees more than
    burst + QPS·w polls in any window w (X3)."""
    engine = Engine(ledger, rng=random.Random(7), poll_qps_max=5.0)
    server = ScriptedServer(polls_until_done=4, interval_s=0.2)
    for i in range(40):
        engine.start_call(
            CallSpec(call_node_id=f"n{i}", binding=binding(), arguments={"i": i}), now=0.0
        )
    run(engine, server)
    assert all(r.state is State.ACCEPTED for r in ledger.list_by_state())
    for times in server.polls.values():
        gaps = [b - a for a, b in itertools.pairwise(times)]
        assert all(gap >= 0.2 - 1e-9 for gap in gaps)
    every = sorted(t for times in server.polls.values() for t in times)
    for start in every:
        assert sum(1 for t in every if start <= t < start + 1.0) <= 5 + 1


def test_cancel_ack_keeps_polling_until_the_real_terminal(ledger: Ledger) -> None:
    """Cancel bumps the generation, sends, and accepts only the observed cancellation (X5)."""
    engine = Engine(ledger, rng=random.Random(1))
    server = ScriptedServer(polls_until_done=1_000)
    engine.start_call(CallSpec(call_node_id="n", binding=binding(), arguments={}), now=0.0)
    now = run(engine, server, until=3.0)
    outcome = engine.cancel("n", now=now)
    assert (outcome.outcome, outcome.cancel_generation) == ("requested", 1)
    run(engine, server, now=now)
    record = ledger.get("n")
    assert record.state is State.CANCELLED_ACCEPTED
    assert ledger.receipt("n").terminal_status is ServerStatus.CANCELLED  # type: ignore[union-attr]
    again = engine.cancel("n", now=now + 100)
    assert again.outcome == "cancelled"


def test_cancel_from_another_process_is_picked_up_by_refresh(ledger: Ledger) -> None:
    """A cancel written to the ledger by the CLI reaches the running engine (O1, X5)."""
    engine = Engine(ledger, rng=random.Random(1))
    server = ScriptedServer(polls_until_done=1_000)
    engine.start_call(CallSpec(call_node_id="n", binding=binding(), arguments={}), now=0.0)
    now = run(engine, server, until=3.0)
    outcome, _ = request_cancel(ledger, ledger.get("n"), now=now, jitter=0.5)
    assert outcome.outcome == "requested"
    assert engine.refresh(now=now) == 1
    run(engine, server, now=now)
    assert ledger.get("n").state is State.CANCELLED_ACCEPTED
    assert "n" in server.cancelled


def test_restart_resolves_an_in_doubt_create_by_key(ledger: Ledger) -> None:
    """A restarted engine looks an in-doubt create up by key; never a blind resubmit (X2, L7)."""
    first = Engine(ledger, rng=random.Random(1))
    first.start_call(CallSpec(call_node_id="n", binding=binding(), arguments={}), now=0.0)
    server = ScriptedServer()
    (submit,) = first.due(0.0)
    server.answer(submit, 0.0)  # the server created it; the reply dies with the process
    second = Engine(ledger, rng=random.Random(2))
    assert second.resume_all(now=5.0) == 1
    assert [a.kind for a in second.due(5.0)] == ["LookupSubmission"]
    assert ledger.get("n").state is State.SUBMISSION_UNKNOWN


def test_stale_executor_lets_go_after_a_takeover(ledger: Ledger) -> None:
    """When a second engine claims the node, the first one's replies are fenced off (D1, R3)."""
    server = ScriptedServer(polls_until_done=2)
    old = Engine(ledger, rng=random.Random(1))
    old.start_call(CallSpec(call_node_id="n", binding=binding(), arguments={}), now=0.0)
    (submit,) = old.due(0.0)
    old.apply_reply(submit, server.answer(submit, 0.0), now=0.1)  # type: ignore[arg-type]
    (poll,) = old.due(5.0)
    new = Engine(ledger, rng=random.Random(2))
    new.resume_all(now=5.0)
    reply = server.answer(poll, 5.0)
    assert reply is not None
    assert old.apply_reply(poll, reply, now=5.1) is None
    assert ledger.get("n").execution_epoch == 1
    assert "n" not in old.records
    run(new, server, now=5.2)
    assert ledger.get("n").state is State.ACCEPTED
    assert len(ledger.receipts()) == 1


def test_input_policy_answers_and_polling_resumes(ledger: Ledger) -> None:
    """An input request goes to the policy hook; its answers are stored and sent (X4)."""
    asked: list[tuple[str, ...]] = []

    def policy(record: object, ask: object) -> dict[str, object]:
        asked.append(ask.keys)  # type: ignore[attr-defined]
        return {"approved": True}

    engine = Engine(ledger, rng=random.Random(1), input_policy=policy)  # type: ignore[arg-type]

    class AskingServer(ScriptedServer):
        def answer(self, action: Action, now: float) -> Outcome | None:
            if action.kind == "Poll" and not self.polls.get(action.call_node_id):
                self.polls[action.call_node_id] = [now]
                return Outcome(event=e.InputRequestObserved(keys=("approved",)))
            return super().answer(action, now)

    engine.start_call(CallSpec(call_node_id="n", binding=binding(), arguments={}), now=0.0)
    run(engine, AskingServer())
    record = ledger.get("n")
    assert asked == [("approved",)]
    assert record.state is State.ACCEPTED
    assert record.input_keys_answered == ("approved",)
    assert ledger.blob("n", answer_blob(1, "approved")) == b"true"


def test_manual_answer_when_no_policy(ledger: Ledger) -> None:
    """Without a policy the operation waits in INPUT_REQUIRED until answered."""
    engine = Engine(ledger, rng=random.Random(1))
    engine.start_call(CallSpec(call_node_id="n", binding=binding(), arguments={}), now=0.0)
    (submit,) = engine.due(0.0)
    engine.apply_reply(submit, Outcome(event=e.SubmitAcknowledged(operation_id="op")), now=0.1)
    (poll,) = engine.due(10.0)
    engine.apply_reply(poll, Outcome(event=e.InputRequestObserved(keys=("k",))), now=10.1)
    assert engine.next_wakeup() is None  # polling paused (X4)
    record = engine.answer("n", {"k": 42}, now=20.0)
    assert record.input_keys_answered == ("k",)
    kinds = [a.kind for a in engine.due(100.0)]
    assert kinds == ["SendInputResponse", "Poll"]


def test_refused_answer_stores_nothing(ledger: Ledger) -> None:
    """An answer the machine refuses (operation no longer waiting) writes no answer blob (X4)."""
    from longcall.core import IllegalTransition
    from longcall.runtime.step import record_answers

    engine = Engine(ledger, rng=random.Random(1))
    engine.start_call(CallSpec(call_node_id="n", binding=binding(), arguments={}), now=0.0)
    (submit,) = engine.due(0.0)
    engine.apply_reply(submit, Outcome(event=e.SubmitAcknowledged(operation_id="op")), now=0.1)
    (poll,) = engine.due(10.0)
    engine.apply_reply(poll, Outcome(event=e.InputRequestObserved(keys=("k",))), now=10.1)
    escalated = engine.records["n"]
    from longcall.runtime.step import apply_event

    escalated = apply_event(
        ledger, escalated, e.ReconciliationEscalated(reason="test"), now=11.0, jitter=0.5
    ).record
    assert escalated.input_keys_pending == ("k",)
    with pytest.raises(IllegalTransition):
        record_answers(ledger, escalated, {"k": 1}, now=12.0, jitter=0.5)
    assert ledger.blob("n", answer_blob(1, "k")) is None


def test_the_last_poll_of_an_operation_let_go_is_forgotten_in_time(ledger: Ledger) -> None:
    """A process keeps the last poll of an operation it let go (a claim back still waits
    the server's interval), but not for ever: an engine that lets go of operations
    accepted elsewhere, turn after turn, does not grow without bound."""
    from longcall.runtime.scheduler import FORGET_LET_GO_POLL_S

    first = Engine(ledger, rng=random.Random(1))
    first.start_call(CallSpec(call_node_id="n", binding=binding(), arguments={}), now=0.0)
    now = run(first, ScriptedServer(polls_until_done=1_000), until=3.0)
    second = Engine(ledger, rng=random.Random(2))  # another process finishes it
    second.resume_all(now=now)
    now = run(second, ScriptedServer(polls_until_done=1), now=now)
    assert ledger.get("n").state is State.ACCEPTED
    first.refresh(now=now)  # accepted elsewhere: let go
    first.housekeep(now=now + 1.0)
    assert "n" in first._last_poll_at  # kept for a claim back
    first.housekeep(now=now + FORGET_LET_GO_POLL_S + 10.0)
    assert "n" not in first._last_poll_at


@pytest.mark.parametrize(
    ("node", "why"),
    [
        ("", "1 to 512 characters"),
        ("n" * 513, "not 513 characters"),
        ("a\u202eb", r"U\+202E"),  # right-to-left override: the line would read backwards
        ("a\tb", r"U\+0009"),
        ("a\u2028b", r"U\+2028"),
    ],
)
def test_a_call_node_id_that_cannot_be_shown_as_given_is_refused(node: str, why: str) -> None:
    """Ids are printed on every line about their call: control, line-breaking and
    direction-changing characters (which a terminal obeys) are refused, as is an empty
    or oversized id; ordinary text of any script is kept."""
    from longcall.errors import InvalidCallNode

    with pytest.raises(InvalidCallNode, match=why):
        CallSpec(call_node_id=node, binding=binding(), arguments={})
    kept = CallSpec(call_node_id="отчёт-報告~shadow-2", binding=binding(), arguments={})
    assert kept.call_node_id == "отчёт-報告~shadow-2"
