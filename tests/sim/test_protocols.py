"""AIP-151 and Apify-style worlds (SPEC P3, P4): deterministic, and every gate holds."""

from __future__ import annotations

import random

from longcall.sim import World, derive_seed, run, run_one
from longcall.sim.server import AIP151, APIFY

NEW_FAULTS = (
    "aip151_start_response_lost",
    "aip151_cancel_races_completion",
    "apify_page_lost",
    "apify_page_contradicts",
    "apify_zero_items",
    "apify_abort_races_completion",
    "not_found_after_retention",
)


def _protocol(seed: int) -> str:
    return World(random.Random(seed)).config.servers[0].protocol


def test_new_protocol_worlds_replay_byte_for_byte() -> None:
    """An AIP-151 and an Apify-style world each print the same trace twice."""
    seeds = [derive_seed(11, i) for i in range(60)]
    for protocol in (AIP151, APIFY):
        seed = next(s for s in seeds if _protocol(s) == protocol)
        first, second = run_one(seed, trace=True), run_one(seed, trace=True)
        assert first.trace is not None
        assert second.trace is not None
        assert "\n".join(first.trace).encode() == "\n".join(second.trace).encode()
        assert protocol in first.trace[0]


def test_mcp_worlds_stay_the_majority() -> None:
    """About 70 % of worlds are MCP, the rest AIP-151 or Apify-style."""
    protocols = [_protocol(derive_seed(0, i)) for i in range(400)]
    new = sum(p in (AIP151, APIFY) for p in protocols)
    assert protocols.count(AIP151) > 0
    assert protocols.count(APIFY) > 0
    assert 0.2 < new / len(protocols) < 0.4


def test_seed_corpus_with_new_protocols_holds_every_gate() -> None:
    """1,000 permutations of seed 1: every new fault class occurs and every gate holds."""
    report = run(1000, seed=1, workers=2)
    assert report.failures == []
    assert report.gates() == dict.fromkeys(report.gates(), True)
    assert all(report.fault_counts[name] > 0 for name in NEW_FAULTS), report.fault_counts
