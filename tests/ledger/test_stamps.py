"""The wall-clock stamp written beside every row: ``datetime.isoformat``'s text."""

from __future__ import annotations

import datetime as dt
import time
import types

import pytest

from longcall.ledger import base


@pytest.mark.parametrize(
    "nanoseconds",
    [
        [1_764_547_199_999_999_000, 1_764_547_200_000_000_000, 1_764_547_200_000_001_999],
        [0, 999_999_000, 1_000_000_000],
        [1_709_164_799_500_000_000, 1_709_164_800_250_000_000],  # into a leap day
    ],
    ids=["midnight", "epoch", "leap-day"],
)
def test_stamps_across_second_and_day_boundaries_match_isoformat(
    monkeypatch: pytest.MonkeyPatch, nanoseconds: list[int]
) -> None:
    """Each stamp equals ``datetime.isoformat`` of the same instant, also right after
    the cached second changes (a second, a day, a leap day)."""
    clock = iter(nanoseconds)
    fake = types.SimpleNamespace(
        time_ns=lambda: next(clock), strftime=time.strftime, gmtime=time.gmtime
    )
    monkeypatch.setattr(base, "time", fake)
    for ns in nanoseconds:
        seconds, micros = divmod(ns // 1000, 1_000_000)
        expected = dt.datetime.fromtimestamp(seconds, dt.UTC).replace(microsecond=micros)
        assert base.utc_now_iso() == expected.isoformat(timespec="microseconds")


def test_a_stamp_is_now_in_utc() -> None:
    stamp = dt.datetime.fromisoformat(base.utc_now_iso())
    assert stamp.utcoffset() == dt.timedelta(0)
    assert abs((dt.datetime.now(dt.UTC) - stamp).total_seconds()) < 5
