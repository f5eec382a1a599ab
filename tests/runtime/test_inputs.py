"""Input requests kept for people, answers checked against their form before they are
stored, and an answer the server refuses leaving the round answerable again (X4)."""

from __future__ import annotations

import random
from pathlib import Path

import pytest
from tests.runtime.test_engine import binding

from longcall.adapters.base import Outcome
from longcall.core import State
from longcall.core import events as e
from longcall.core.keys import canonical_json
from longcall.core.retry import FailureKind, RequestKind
from longcall.ledger import Ledger, SQLiteLedger
from longcall.runtime.engine import Action, CallSpec, Engine
from longcall.runtime.inputs import (
    InputQuestion,
    InvalidAnswer,
    answer_blob,
    answer_from_fields,
    pending_request,
    read_answer,
    validate_answer,
)

FORM = {
    "type": "object",
    "properties": {
        "approved": {"type": "boolean", "description": "Apply the change?"},
        "reason": {"type": "string"},
        "size": {"type": "string", "enum": ["s", "m", "l"]},
    },
    "required": ["approved"],
}
REQUESTS = {
    "elicit-1": {
        "method": "elicitation/create",
        "params": {"mode": "form", "message": "Approve the change?", "requestedSchema": FORM},
    }
}


@pytest.fixture
def ledger(tmp_path: Path) -> Ledger:
    """A real SQLite file ledger."""
    return SQLiteLedger(tmp_path / "l.db", synchronous="off")


def asking(ledger: Ledger) -> Engine:
    """An engine whose one operation ``n`` waits for the form above."""
    engine = Engine(ledger, rng=random.Random(1))
    engine.start_call(CallSpec(call_node_id="n", binding=binding(), arguments={}), now=0.0)
    (submit,) = engine.due(0.0)
    engine.apply_reply(submit, Outcome(event=e.SubmitAcknowledged(operation_id="op")), now=0.1)
    (poll,) = engine.due(10.0)
    observed = e.InputRequestObserved(keys=("elicit-1",), server_status_raw="input_required")
    engine.apply_reply(poll, Outcome(event=observed, payload=canonical_json(REQUESTS)), now=10.1)
    return engine


def test_the_question_and_its_form_are_kept_with_the_round(ledger: Ledger) -> None:
    """An observed input request is stored under its key and read back as the pending round."""
    asking(ledger)
    request = pending_request(ledger, ledger.get("n"))
    assert request is not None
    assert (request.input_round, request.keys) == (1, ("elicit-1",))
    question = request.question("elicit-1")
    assert question.message == "Approve the change?"
    assert question.is_form
    assert [(f.name, f.type, f.required) for f in question.fields] == [
        ("approved", "boolean", True),
        ("reason", "string", False),
        ("size", "string", False),
    ]


def test_a_wrong_shaped_answer_is_refused_before_anything_is_stored(ledger: Ledger) -> None:
    """An answer that does not fit the form raises InvalidAnswer; no blob, no new version."""
    engine = asking(ledger)
    version = ledger.get("n").version
    wrong = [
        True,
        {"action": "accept"},
        {"action": "accept", "content": {"approved": "yes"}},
        {"action": "accept", "content": {"reason": "x"}},
        {"action": "maybe"},
        {"action": "accept", "content": {"approved": True, "note": {"nested": 1}}},
        {"action": "accept", "content": {"approved": True, "size": "xl"}},
    ]
    for answer in wrong:
        with pytest.raises(InvalidAnswer):
            engine.answer("n", {"elicit-1": answer}, now=20.0)
    assert ledger.get("n").version == version
    assert ledger.blob("n", answer_blob(1, "elicit-1")) is None
    assert engine.next_wakeup() is None  # still waiting for a person


def test_fields_typed_as_text_make_a_checked_answer(ledger: Ledger) -> None:
    """``approved=true`` becomes a boolean by the form's type; unknown fields are refused."""
    asking(ledger)
    request = pending_request(ledger, ledger.get("n"))
    assert request is not None
    question = request.question("elicit-1")
    answer = answer_from_fields(question, {"approved": "yes", "size": "m"})
    assert answer == {"action": "accept", "content": {"approved": True, "size": "m"}}
    for fields in ({"approved": "perhaps"}, {"aproved": "true"}, {"reason": "no approval"}):
        with pytest.raises(InvalidAnswer):
            answer_from_fields(question, fields)
    assert request.accept(approved=False, unrelated=1) == {
        "elicit-1": {"action": "accept", "content": {"approved": False}}
    }


def test_a_refused_answer_leaves_the_round_answerable_again(ledger: Ledger) -> None:
    """The server refusing a delivered answer reopens its key in a new round; the next
    answer is stored apart and is the one delivered (X4)."""
    engine = asking(ledger)
    first = {"action": "accept", "content": {"approved": True}}
    engine.answer("n", {"elicit-1": first}, now=20.0)
    (send,) = [a for a in engine.due(20.0) if a.kind == "SendInputResponse"]
    assert engine.input_answers(send.record, ("elicit-1",)) == {"elicit-1": first}
    refused = e.RequestFailed(
        request=RequestKind.INPUT, failure=FailureKind.VALIDATION, detail="invalid params"
    )
    engine.apply_reply(send, Outcome(event=refused), now=20.1)
    record = ledger.get("n")
    assert record.state is State.INPUT_REQUIRED
    assert (record.input_round, record.input_keys_pending) == (2, ("elicit-1",))
    assert "invalid params" in (record.last_error or "")
    assert record.reconciliation_reason is None
    assert pending_request(ledger, record) is not None
    second = {"action": "decline"}
    engine.answer("n", {"elicit-1": second}, now=30.0)
    actions: list[Action] = engine.due(30.0)
    (resend,) = [a for a in actions if a.kind == "SendInputResponse"]
    assert engine.input_answers(resend.record, ("elicit-1",)) == {"elicit-1": second}
    assert read_answer(ledger, ledger.get("n"), "elicit-1") == second


@pytest.mark.parametrize(
    "schema",
    [
        pytest.param({"type": "object", "properties": {"a": {"type": 7}}}, id="not-a-schema"),
        pytest.param({"type": "object", "maximum": float("nan")}, id="nan"),
    ],
)
def test_a_broken_form_schema_leaves_the_answer_to_the_server(schema: dict[str, object]) -> None:
    """A form whose schema is invalid (or not even plain JSON) cannot judge an answer:
    the answer passes the shape checks and the server decides; asking twice (the
    checked validator is cached) gives the same verdict."""
    question = InputQuestion(key="k", method="elicitation/create", message=None, schema=schema)
    answer = {"action": "accept", "content": {"a": "x"}}
    assert validate_answer(question, answer) == answer
    assert validate_answer(question, answer) == answer


def test_the_same_form_twice_judges_each_answer_on_its_own() -> None:
    """The cached validator of a form still refuses a wrong answer after a right one."""
    question = InputQuestion(key="k", method="elicitation/create", message=None, schema=FORM)
    assert validate_answer(question, {"action": "accept", "content": {"approved": True}})
    with pytest.raises(InvalidAnswer, match="size"):
        validate_answer(question, {"action": "accept", "content": {"approved": True, "size": "x"}})
