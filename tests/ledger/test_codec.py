"""The stored JSON of records and receipts: canonical (keys sorted, no spaces)."""

from __future__ import annotations

import json

from longcall import walkthrough
from longcall.ledger import SQLiteLedger, codec


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
