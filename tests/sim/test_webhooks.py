"""Webhook deliveries as a push channel of the simulator (S7, X3): deterministic, a
hint only (the accepted terminals are the poll-only run's), forgeries refused, and the
planted webhook bugs caught."""

from __future__ import annotations

import dataclasses
import json
import random
from collections.abc import Callable

from click.testing import CliRunner

from longcall.cli import main
from longcall.sim import derive_seed, run_one
from longcall.sim.mutants import catch, mutant
from longcall.sim.report import run
from longcall.sim.webhooks import (
    Terminal,
    WebhookChannel,
    WebhookFaults,
    channel_rng,
    run_webhooks,
)
from longcall.sim.world import World

CORPUS = 200
"""Permutations of the test run (the 10,000 run is in docs/design/simulator.md)."""


def test_same_seed_same_webhook_run_byte_for_byte() -> None:
    """Two runs of one seed with webhooks print the same trace and measure the same."""
    for index in range(10):
        seed = derive_seed(5, index)
        first, second = run_webhooks(seed, trace=True), run_webhooks(seed, trace=True)
        assert first.trace is not None
        assert "\n".join(first.trace).encode() == "\n".join(second.trace or []).encode()
        assert dataclasses.asdict(first) == dataclasses.asdict(second)


SILENT = WebhookFaults(
    dropped=1.0, duplicated=0.0, delayed=0.0, late=0.0, reordered=0.0, forged=0.0
)
"""Every delivery dropped, no forgery: the channel only signs."""


def _silent(seed: int, channels: list[WebhookChannel]) -> Callable[[World], WebhookChannel]:
    def attach(world: World) -> WebhookChannel:
        channel = WebhookChannel(world, channel_rng(seed))
        channel.faults = SILENT
        channels.append(channel)
        return channel

    return attach


def test_a_channel_that_delivers_nothing_is_the_poll_only_world() -> None:
    """The channel draws from its own generator and reads the truth from copies: with
    every delivery dropped (and no forgery), the world is the poll-only one, measure
    for measure. So what differs with deliveries is what the deliveries caused."""
    for index in range(15):
        seed = derive_seed(9, index)
        channels: list[WebhookChannel] = []
        quiet = World(random.Random(seed), seed=seed, channel=_silent(seed, channels)).run()
        alone = run_one(seed)
        assert channels[0].stats.sent > 0
        assert channels[0].stats.dropped == channels[0].stats.sent
        assert dataclasses.asdict(quiet) == dataclasses.asdict(alone)


def test_webhook_corpus_holds_every_gate_and_exercises_every_fault() -> None:
    """The corpus with webhooks: every gate holds (the existing ones and the channel's),
    and each fault of the channel happened and was answered as it must be."""
    report = run(CORPUS, seed=0, webhooks=True)
    assert report.ok, report.failures
    stats = report.webhooks
    assert stats is not None
    assert stats.sent > 0
    assert stats.verified > 0
    assert stats.woken > 0
    assert stats.forged_refused > 0
    assert stats.forged_accepted == 0
    assert stats.duplicates_ignored > 0
    assert stats.late_refused > 0
    assert stats.reordered > 0
    assert stats.dropped > 0
    assert stats.moved == 0
    assert stats.terminals_differ == 0
    assert stats.nodes_compared > 50 * stats.truth_moved
    names = [gate.name for gate in report.gate_list()]
    assert "accepted terminals = polling only" in names
    assert "forged webhooks refused" in names


def test_cli_webhooks_json_and_replay() -> None:
    """``longcall sim --webhooks`` reports the channel's gates and counts; a replay
    with ``--webhooks`` reruns one permutation with its deliveries in the trace."""
    runner = CliRunner()
    out = runner.invoke(main, ["sim", "--webhooks", "--permutations", "5", "--json"])
    assert out.exit_code == 0, out.output
    data = json.loads(out.stdout)
    assert data["gates"]["no webhook moves an operation"]["holds"]
    assert data["webhooks"]["sent"] > 0
    replayed = runner.invoke(main, ["sim", "--replay", str(derive_seed(0, 0)), "--webhooks"])
    assert replayed.exit_code == 0, replayed.output
    assert " webhook " in replayed.output
    plain = json.loads(runner.invoke(main, ["sim", "--permutations", "5", "--json"]).stdout)
    assert "forged webhooks refused" not in plain["gates"]
    assert plain["webhooks"] is None


def test_the_webhook_gates_catch_the_planted_webhook_bugs() -> None:
    """A receiver that takes any signature, a hint that polls under the interval, and
    a delivery's status taken as the outcome: each caught by its gate."""
    expected = {
        "webhook-unverified": "forged webhook refused",
        "webhook-poll-at-once": "poll interval",
        "webhook-status-is-outcome": "webhook moved an operation",
    }
    for name, check in expected.items():
        found = catch(mutant(name), permutations=50)
        assert found.check == check, found


def test_accepted_terminals_compare_state_digest_and_kind_whoever_settled() -> None:
    """Two receipts are the same outcome when state, digest and kind agree, whether the
    engine or an operator settled either of them."""
    engine = Terminal(state="accepted", kind="tool_error", digest="sha256:a", by_operator=False)
    assert engine.same(dataclasses.replace(engine))
    assert engine.same(dataclasses.replace(engine, by_operator=True))
    assert not engine.same(dataclasses.replace(engine, digest="sha256:b"))
    assert not engine.same(dataclasses.replace(engine, state="cancelled_accepted"))
    assert not engine.same(dataclasses.replace(engine, kind="value"))
    assert not engine.same(dataclasses.replace(engine, kind="value", by_operator=True))


def test_an_operator_accepts_a_result_as_the_kind_the_engine_fetched() -> None:
    """A permutation where a webhook's timing sends a call node to the operator that the
    poll-only run settled itself: the operator supplies the same bytes (a tool error
    that completed, over MCP 2026-07-28) and they are accepted as the same kind. Before
    the operator's result was read by the protocol's rules it was accepted as a value."""
    result = run_webhooks(130085657985317)
    assert result.violations == []
    assert result.webhooks.nodes_compared > 0
    assert result.operator_resolutions > 0
