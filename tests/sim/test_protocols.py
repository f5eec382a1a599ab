"""AIP-151 and Apify-style worlds (SPEC P3, P4): deterministic, and every gate holds."""

from __future__ import annotations

import random

from longcall.adapters.exchange import HttpRequest
from longcall.core.keys import digest_json
from longcall.sim import World, derive_seed, run, run_one
from longcall.sim.apify import ApifyServer
from longcall.sim.config import DEFAULT, HARSH
from longcall.sim.mcp import TOOL
from longcall.sim.server import AIP151, APIFY, Hold, Served

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


def _start_request(arguments: dict[str, object]) -> HttpRequest:
    params = {"name": TOOL, "arguments": {**arguments, "waitSecs": 30}}
    message = {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": params}
    return HttpRequest(json_body=message)


def test_a_held_start_left_behind_answers_no_other_start() -> None:
    """The Apify-style server answers a held start with the run it created, by the held
    request. A held start whose flight ended (its worker killed or retired) leaves its
    entry behind: a later start, even one whose request object reuses the address of
    the freed one, starts or finds its own run (seeds 168881015537432 default and
    18236621293907 harsh took another start's run, only when not tracing)."""
    world = World(random.Random(168881015537432), seed=168881015537432)
    server = world.servers["s0"]
    assert isinstance(server, ApifyServer)
    server.idempotent = False  # every start starts a run
    plan = next(iter(world.config.plans.values()))
    for name in ("a", "b"):
        server.plans[digest_json({"node": name})] = plan
    left = _start_request({"node": "a"})
    assert isinstance(server.serve(left, 0.0, None), Hold)  # its flight then ends
    # A fresh arrival that reuses the request object (as a reused address would):
    again = server.serve(left, 1.0, None)
    assert isinstance(again, Hold)
    other = _start_request({"node": "b"})
    held = server.serve(other, 2.0, None)
    assert isinstance(held, Hold)
    answer = server.serve(other, held.until, None, held_since=2.0)
    assert isinstance(answer, Served)
    assert [t.task_id for t in server.tasks] == ["s0-run1", "s0-run2", "s0-run3"]
    assert answer.handed == "s0-run3"


def test_apify_worlds_run_the_same_traced_or_not() -> None:
    """The measured run is the replayed run in the two worlds whose verdicts differed."""
    for seed, profile in ((168881015537432, DEFAULT), (18236621293907, HARSH)):
        quiet = run_one(seed, profile=profile)
        loud = run_one(seed, profile=profile, trace=True)
        assert (quiet.violations, quiet.faults) == (loud.violations, loud.faults)
        assert quiet.violations == []
