"""Gates say what they judged, and a gate that judged nothing fails (SPEC F3)."""

from __future__ import annotations

from typing import Any

import pytest

from longcall.sim import run
from longcall.sim.report import Report
from longcall.sim.server import SimServer
from longcall.sim.truth import Task


def test_a_report_that_judged_nothing_passes_no_gate() -> None:
    """All values at their ideal, but nothing judged: every gate fails, and so the run."""
    report = Report(permutations=1, seed=0)
    report.permutations = 0
    assert not any(report.gates().values())
    assert all(gate.met and not gate.holds for gate in report.gate_list())
    assert not report.ok


def test_a_wire_tap_that_stops_recording_fails_the_poll_gates(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """If the servers stopped recording the reads they receive, the poll gates would
    judge nothing; they fail instead of reading 0 violations vacuously."""
    original = SimServer.observe

    def observe_unrecorded(self: SimServer, task_id: str, now: float, hop: Any) -> Task | None:
        return original(self, task_id, now, None)

    monkeypatch.setattr(SimServer, "observe", observe_unrecorded)
    report = run(20, seed=3, workers=1)
    gates = {gate.name: gate for gate in report.gate_list()}
    for name in ("poll QPS <= 2", "poll interval respected", "poll delays jittered"):
        assert gates[name].judged == 0
        assert gates[name].met
        assert not gates[name].holds
    assert not report.ok


def test_the_same_corpus_recorded_judges_every_poll_gate() -> None:
    """Unpatched, the same corpus judges reads on the wire and passes the poll gates."""
    report = run(20, seed=3, workers=1)
    gates = {gate.name: gate for gate in report.gate_list()}
    for name in ("poll QPS <= 2", "poll interval respected", "poll delays jittered"):
        assert gates[name].judged > 0
        assert gates[name].holds
