"""The wire measures of the poll gates, on hand-made reads (SPEC X3, F3)."""

from __future__ import annotations

from longcall.sim import measures


def test_poll_rate_counts_the_busiest_second_per_executor_and_server() -> None:
    """Reads of two executors do not add up; a window is [t, t + 1)."""
    reads = [(0, "s", 0.0), (0, "s", 0.5), (0, "s", 1.0), (1, "s", 0.2), (1, "s", 0.3)]
    assert measures.poll_rate(reads) == (2, 5)
    assert measures.poll_rate([]) == (0, 0)


def test_interval_findings_judge_only_reads_after_a_told_interval() -> None:
    """A read closer than the interval told before it is a finding; before anything was
    told, nothing is judged."""
    reads = [(0, 1.0, "t", "n"), (0, 2.0, "t", "n"), (0, 6.0, "t", "n"), (0, 7.0, "t", "n")]
    told = {(0, "t"): [(1.5, 4.0)]}
    findings, judged = measures.interval_findings(reads, told)
    assert judged == 3
    assert len(findings) == 2  # 2.0 -> 6.0 keeps 4 s; 1.0 -> 2.0 and 6.0 -> 7.0 do not


def test_jitter_findings_flag_a_delay_of_exactly_the_interval() -> None:
    """A read exactly one interval after its basis has no jitter; one later has."""
    told = {(0, "t"): [(0.0, 2.0)]}
    bases = {(0, "n"): [(0.0, True), (10.0, True)]}
    reads = [(0, 2.0, "t", "n"), (0, 12.3, "t", "n")]
    findings, judged = measures.jitter_findings(reads, told, bases, {}, jitter_fraction=0.2)
    assert judged == 2
    assert len(findings) == 1


def test_jitter_is_not_judged_where_a_limit_or_retry_after_sets_the_delay() -> None:
    """A read near the wait budget, or after a Retry-After answer, is not judged."""
    told = {(0, "t"): [(0.0, 2.0)]}
    bases = {(0, "n"): [(0.0, True), (10.0, False)]}
    reads = [(0, 2.0, "t", "n"), (0, 12.0, "t", "n")]
    findings, judged = measures.jitter_findings(reads, told, bases, {"n": 2.1}, jitter_fraction=0.2)
    assert (findings, judged) == ([], 0)


def test_retry_after_findings_hold_every_request_of_the_executor() -> None:
    """After a Retry-After of 5 s delivered at t = 10, any request at 12 (a cancel as
    much as a read), or in the very instant of the delivery, is too soon; one sent
    before it is not judged."""
    sent = [(0, 9.0, "Poll", "n"), (0, 12.0, "SendCancel", "n"), (1, 11.0, "Poll", "m")]
    findings, judged = measures.retry_after_findings(sent, [(0, 10.0, 5.0)])
    assert judged == 1
    assert findings == ["e0 sent SendCancel at 12.000, 2.000 s after a Retry-After of 5 s"]
    findings, judged = measures.retry_after_findings([(0, 10.0, "Poll", "n")], [(0, 10.0, 5.0)])
    assert (len(findings), judged) == (1, 1)
    findings, judged = measures.retry_after_findings([(0, 15.5, "Poll", "n")], [(0, 10.0, 5.0)])
    assert (findings, judged) == ([], 1)
