"""One seed, one run: the simulator is deterministic byte for byte (SPEC F3 replay)."""

from __future__ import annotations

import random

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from longcall.sim import World, derive_seed, run_one
from longcall.sim.checks import ObservedLedger


def test_same_seed_same_trace_byte_for_byte() -> None:
    """Two runs of one seed print exactly the same trace and verdict."""
    for index in range(20):
        seed = derive_seed(7, index)
        first, second = run_one(seed, trace=True), run_one(seed, trace=True)
        assert first.trace is not None
        assert "\n".join(first.trace).encode() == "\n".join(second.trace or []).encode()
        assert first.violations == second.violations
        assert first.faults == second.faults


def test_tracing_does_not_change_the_run() -> None:
    """Recording the trace draws nothing: the measured run is the replayed run."""
    for index in range(10):
        seed = derive_seed(3, index)
        quiet, loud = run_one(seed), run_one(seed, trace=True)
        assert (quiet.violations, quiet.faults, quiet.cancel_latencies) == (
            loud.violations,
            loud.faults,
            loud.cancel_latencies,
        )


def test_permutation_seeds_are_derived_from_the_run_seed() -> None:
    """Permutation i of run S always gets the same seed; different (S, i) differ."""
    assert derive_seed(0, 0) == derive_seed(0, 0)
    seeds = {derive_seed(s, i) for s in range(3) for i in range(100)}
    assert len(seeds) == 300


def test_a_crash_with_a_file_ledger_replays() -> None:
    """A permutation that restarts on a real SQLite file replays identically too."""
    seed = next(
        derive_seed(11, i)
        for i in range(2000)
        if World(random.Random(derive_seed(11, i))).config.file_ledger
    )
    first, second = run_one(seed, trace=True), run_one(seed, trace=True)
    assert first.trace == second.trace
    assert first.faults["executor_crash"] > 0
    assert not first.violations


@settings(
    max_examples=15,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow],
)
@given(rng=st.randoms(use_true_random=False))
def test_hypothesis_driven_worlds_hold_every_check(rng: random.Random) -> None:
    """Hypothesis supplies the world's only randomness, so a failure would shrink.

    The jitter gate is left out here: it tells "no jitter" from a uniform draw, and a
    hypothesis stream favours boundary draws (a jitter of exactly 0.0 everywhere is its
    simplest example), which no schedule can tell from no jitter at all."""
    result = World(rng).run()
    assert [v for v in result.violations if v.check != "poll jitter"] == []


def test_the_process_ledger_changes_nothing_a_world_does() -> None:
    """A world on the process's shared, emptied ledger runs exactly as on a ledger of
    its own, whatever ran before it (the pool only saves opening one)."""

    class OwnLedger(ObservedLedger):
        """The same ledger, opened for this world alone."""

    seed = derive_seed(5, 3)
    alone = run_one(seed, trace=True, ledger_factory=OwnLedger)
    for index in range(3):
        run_one(derive_seed(5, index))
    shared = run_one(seed, trace=True)
    assert shared.trace == alone.trace
    assert shared.violations == alone.violations
