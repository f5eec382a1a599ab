"""The gateway's downtimes, on both backends: recorded, read by their end, clean stops
settled by the next recorded downtime, old ones forgotten."""

from __future__ import annotations

from longcall.ledger import Downtime, Ledger


def test_a_downtime_is_read_back_while_it_ends_after_the_bound(ledger: Ledger) -> None:
    ledger.record_downtime(100.0, 250.0, forget_before=0.0)
    ledger.record_downtime(400.0, 450.5, forget_before=0.0)
    assert ledger.downtimes(ending_after=0.0) == [
        Downtime(started_at=100.0, ended_at=250.0),
        Downtime(started_at=400.0, ended_at=450.5),
    ]
    assert ledger.downtimes(ending_after=250.0) == [Downtime(started_at=400.0, ended_at=450.5)]
    assert ledger.downtimes(ending_after=450.5) == []


def test_a_clean_stop_is_open_until_a_downtime_with_an_end_settles_it(ledger: Ledger) -> None:
    ledger.record_downtime(100.0, None, forget_before=0.0)
    assert ledger.downtimes(ending_after=1e9) == [Downtime(started_at=100.0, ended_at=None)]
    ledger.record_downtime(100.0, 700.0, forget_before=0.0)
    assert ledger.downtimes(ending_after=0.0) == [Downtime(started_at=100.0, ended_at=700.0)]


def test_downtimes_that_ended_before_the_bound_are_forgotten(ledger: Ledger) -> None:
    ledger.record_downtime(10.0, 20.0, forget_before=0.0)
    ledger.record_downtime(30.0, 40.0, forget_before=0.0)
    ledger.record_downtime(900.0, 950.0, forget_before=35.0)
    assert ledger.downtimes(ending_after=-1.0) == [
        Downtime(started_at=30.0, ended_at=40.0),
        Downtime(started_at=900.0, ended_at=950.0),
    ]
