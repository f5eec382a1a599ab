"""The stored JSON of records and receipts: canonical (keys sorted, no spaces)."""

from __future__ import annotations

import dataclasses
import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from longcall.core import OperationRecord, ResultKind, ServerStatus, State, TerminalReceipt
from longcall.core.record import evolve
from longcall.ledger import CorruptRow, SQLiteLedger, codec
from longcall.testing import scripted as walkthrough


def test_dumps_is_the_sorted_canonical_json_and_round_trips() -> None:
    """A record and a receipt encode exactly as json with sorted keys, and decode back."""
    with SQLiteLedger(":memory:") as ledger:
        walkthrough.start(ledger, "a", walkthrough.COMPLETED, now=0.0)
        walkthrough.drive(ledger, "a", walkthrough.COMPLETED, now=0.0)
        record, receipt = ledger.get("a"), ledger.receipt("a")
    assert receipt is not None
    for value in (record, receipt):
        expected = json.dumps(codec.to_dict(value), sort_keys=True, separators=(",", ":"))
        assert codec.dumps(value) == expected
    assert codec.loads_record(codec.dumps(record)) == record
    assert codec.loads_receipt(codec.dumps(receipt)) == receipt


def _stored(value: object) -> dict[str, object]:
    return json.loads(codec.dumps(value))  # type: ignore[arg-type]


def test_a_field_missing_from_an_older_row_reads_as_its_default() -> None:
    """A row written before a field existed still decodes: the field takes its default."""
    with SQLiteLedger(":memory:") as ledger:
        record = walkthrough.start(ledger, "a", walkthrough.COMPLETED, now=0.0)
    data = _stored(record)
    for name in ("shadow_of", "warnings", "server_status", "resolved_by"):
        del data[name]
    decoded = codec.record_from_dict(data)
    assert decoded == record
    assert decoded.warnings == ()
    assert decoded.shadow_of is None


def test_a_missing_required_field_is_a_corrupt_row_naming_it() -> None:
    """A row without a field that has no default is damage, reported with the field."""
    with SQLiteLedger(":memory:") as ledger:
        record = walkthrough.start(ledger, "a", walkthrough.COMPLETED, now=0.0)
    data = _stored(record)
    del data["request_digest"]
    with pytest.raises(CorruptRow, match="request_digest"):
        codec.record_from_dict(data)


def test_decoded_enums_and_tuples_have_their_types() -> None:
    """Enum fields come back as enum members and list fields as tuples, equal to the
    record that was stored (not merely equal-looking JSON)."""
    with SQLiteLedger(":memory:") as ledger:
        walkthrough.start(ledger, "a", walkthrough.COMPLETED, now=0.0)
        record = walkthrough.drive(ledger, "a", walkthrough.COMPLETED, now=0.0)
    decoded = codec.loads_record(codec.dumps(record))
    assert isinstance(decoded.state, State)
    assert isinstance(decoded.server_status, ServerStatus)
    assert isinstance(decoded.input_keys_answered, tuple)
    assert decoded.input_keys_answered
    assert decoded == record


_SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(),
)
_ENUMS = {"state": State, "server_status": ServerStatus, "result_kind": ResultKind}


def _field_values(name: str) -> st.SearchStrategy[object]:
    if name in _ENUMS:
        return st.one_of(st.none(), st.sampled_from(list(_ENUMS[name])))
    if name in ("input_keys_pending", "input_keys_answered", "warnings"):
        return st.one_of(
            st.lists(st.text(), max_size=3).map(tuple), st.lists(_SCALARS, max_size=3).map(tuple)
        )
    return _SCALARS


@st.composite
def _records(draw: st.DrawFn) -> OperationRecord:
    with SQLiteLedger(":memory:") as ledger:
        record = walkthrough.start(ledger, "a", walkthrough.COMPLETED, now=0.0)
    names = draw(st.sets(st.sampled_from([f.name for f in dataclasses.fields(record)])))
    return evolve(record, **{name: draw(_field_values(name)) for name in names})


@settings(max_examples=300, deadline=None)
@given(_records())
def test_dumps_equals_the_json_encoder_whatever_the_fields_hold(record: OperationRecord) -> None:
    """The field-by-field writer gives the json module's text for any field values:
    non-ASCII and lone surrogates, NaN and infinities, huge integers, a bool or a float
    where an int belongs, None where a value belongs, tuples of anything."""
    expected = json.dumps(codec.to_dict(record), sort_keys=True, separators=(",", ":"))
    assert codec.dumps(record) == expected


@st.composite
def _receipts(draw: st.DrawFn) -> TerminalReceipt:
    with SQLiteLedger(":memory:") as ledger:
        walkthrough.start(ledger, "a", walkthrough.COMPLETED, now=0.0)
        walkthrough.drive(ledger, "a", walkthrough.COMPLETED, now=0.0)
        receipt = ledger.receipt("a")
    assert receipt is not None
    enums = {"terminal_status": ServerStatus, "result_kind": ResultKind}
    changes: dict[str, object] = {}
    for name in draw(st.sets(st.sampled_from([f.name for f in dataclasses.fields(receipt)]))):
        values = st.sampled_from(list(enums[name])) if name in enums else _field_values(name)
        changes[name] = draw(values)
    return dataclasses.replace(receipt, **changes)  # type: ignore[arg-type]


@settings(max_examples=150, deadline=None)
@given(_receipts())
def test_receipt_text_equals_the_json_encoder_whatever_the_fields_hold(
    receipt: TerminalReceipt,
) -> None:
    """The same for receipts, whose enum fields are never None."""
    expected = json.dumps(codec.to_dict(receipt), sort_keys=True, separators=(",", ":"))
    assert codec.dumps(receipt) == expected


_CHANGED = st.sets(st.sampled_from([f.name for f in dataclasses.fields(OperationRecord)]))


@settings(max_examples=300, deadline=None)
@given(_records(), st.lists(_CHANGED.flatmap(
    lambda names: st.fixed_dictionaries({name: _field_values(name) for name in names})
), min_size=1, max_size=4))  # fmt: skip
def test_a_text_made_from_the_last_one_equals_a_whole_encoding(
    record: OperationRecord, steps: list[dict[str, object]]
) -> None:
    """Each text RecordTexts makes from the node's last one is the text dumps writes,
    whatever a write changes: fields set to other values, to equal values that are other
    objects, or to anything the encoder's slow path takes."""
    texts = codec.RecordTexts()
    assert texts.dumps(record) == codec.dumps(record)
    for changes in steps:
        record = evolve(record, **changes)
        assert texts.dumps(record) == codec.dumps(record)


def test_record_texts_hold_at_most_their_limit_and_let_a_terminal_record_go() -> None:
    """The last text of at most ``keep`` call nodes is held, the longest unwritten let go
    first; a node's terminal record is not held at all. Texts stay exact throughout."""
    with SQLiteLedger(":memory:") as ledger:
        record = walkthrough.start(ledger, "a", walkthrough.COMPLETED, now=0.0)
        final = walkthrough.drive(ledger, "a", walkthrough.COMPLETED, now=0.0)
    texts = codec.RecordTexts(keep=2)
    nodes = [evolve(record, call_node_id=name) for name in ("n1", "n2", "n3")]
    for node in (*nodes, nodes[0]):
        assert texts.dumps(node) == codec.dumps(node)
    assert sorted(texts._last) == ["n1", "n3"]  # n2 was the longest unwritten
    assert texts.dumps(evolve(final, call_node_id="n1")) == codec.dumps(
        evolve(final, call_node_id="n1")
    )
    assert sorted(texts._last) == ["n3"]
