"""The checks can fail: each planted bug is caught within a few permutations (SPEC F2, F3).

Every bug is planted outside ``core`` and ``runtime`` (tests/sim/planted.py). The
permutation counts are the smallest that catch each bug with seed 0 (first caught
at permutation 5, 1, 7, 47 and 1), plus a small margin; all are far below the
10,000 of a release run.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest
from tests.sim import planted

from longcall.sim import Report, Result, run, run_one


def _run(permutations: int, **planted_parts: object) -> Report:
    def runner(seed: int) -> Result:
        return run_one(seed, **planted_parts)  # type: ignore[arg-type]

    return run(permutations, seed=0, runner=runner)


def _violations(report: Report) -> list[str]:
    return [line for failure in report.failures for line in failure["violations"]]


def test_accept_without_cas_is_caught_with_the_executor_race() -> None:
    """A ledger without compare-and-set plus two racing executors breaks L4 or the table."""
    report = _run(10, ledger_factory=planted.NoCasLedger)
    assert not report.ok
    assert report.fault_counts["executor_race"] > 0
    assert any(
        "(L4)" in v or "not in table" in v or "epoch went back" in v for v in _violations(report)
    )


def test_accept_before_fetch_is_caught() -> None:
    """A completed status accepted with a fabricated digest, never fetched, is reported."""
    report = _run(3, adapter_factory=planted.mcp_only(planted.FabricatingAdapter))
    assert not report.ok
    assert any("without fetching it" in v for v in _violations(report))


def test_cancel_ack_as_terminal_is_caught() -> None:
    """Taking a 2026-07-28 cancel ack for the cancelled terminal diverges from the truth."""
    report = _run(10, adapter_factory=planted.mcp_only(planted.AckIsCancelAdapter))
    assert report.terminal_divergence > 0
    assert not report.gates()["terminal_divergence = 0"]


def test_fresh_key_after_lost_create_is_caught() -> None:
    """A resubmission under a fresh key creates a second remote operation."""
    report = _run(60, adapter_factory=planted.mcp_only(planted.FreshKeyAdapter))
    assert report.duplicate_operations > 0
    assert not report.gates()["duplicate_operations = 0"]


def test_ignoring_the_poll_interval_is_caught() -> None:
    """Dropping the server's interval polls sooner than it asked."""
    report = _run(3, adapter_factory=planted.mcp_only(planted.IgnoreIntervalAdapter))
    assert report.poll_interval_violations > 0
    assert not report.gates()["poll interval respected"]


def test_fresh_request_id_after_lost_aip151_start_is_caught() -> None:
    """An AIP-151 resend under a fresh requestId creates a second operation (X2, P3)."""
    report = _run(150, adapter_factory=planted.fresh_request_id)
    assert report.fault_counts["aip151_start_response_lost"] > 0
    assert report.duplicate_operations > 0
    assert not report.gates()["duplicate_operations = 0"]


@pytest.mark.parametrize(
    "parts",
    [
        {"ledger_factory": planted.NoCasLedger},
        {"adapter_factory": planted.mcp_only(planted.FabricatingAdapter)},
        {"adapter_factory": planted.mcp_only(planted.AckIsCancelAdapter)},
        {"adapter_factory": planted.mcp_only(planted.FreshKeyAdapter)},
        {"adapter_factory": planted.mcp_only(planted.IgnoreIntervalAdapter)},
    ],
    ids=["no-cas", "fabricate", "ack-is-cancel", "fresh-key", "ignore-interval"],
)
def test_a_planted_bug_names_a_replayable_seed(parts: dict[str, Callable[..., object]]) -> None:
    """Every failure carries its seed and a one-line replay command."""
    report = _run(60, **parts)
    assert report.failures
    for failure in report.failures:
        assert failure["replay"] == f"longcall sim --replay {failure['seed']}"
